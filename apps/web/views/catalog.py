"""The server catalog: known-good starting points (apps/registry/catalog.py) registered in one
click, or after adjusting the fields, through the same form and service as any other server."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.accounts import selectors as accounts
from apps.accounts.roles import Role
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.registry import services
from apps.registry.catalog import CatalogEntry, catalog, catalog_entry
from apps.registry.models import TRUST_TIER_HELP, TrustTier
from apps.web.access import member_required
from apps.web.forms import apply_domain_errors
from apps.web.views.servers import ServerForm


def initial_data(entry: CatalogEntry) -> dict[str, str]:
    """The entry as the registration form's fields."""
    fields = entry.server_fields()
    return {**fields, "args": "\n".join(fields["args"]),
            "env": "\n".join(f"{k}={v}" for k, v in fields["env"].items())}


def server_admins(request: HttpRequest) -> list[str]:
    """Whom a builder asks to register a server: the organisation's owners and admins (their emails)."""
    if request.actor.can("servers.manage"):
        return []
    members = accounts.org_members(org_id=request.actor.org_id).filter(role__in=[Role.OWNER, Role.ADMIN])
    return [m.user.email for m in members if m.user.is_active]


@member_required()
def server_catalog(request: HttpRequest) -> HttpResponse:
    return render(request, "web/servers/catalog.html", {"entries": catalog(), "admins": server_admins(request),
                                                        "catalog_url": request.build_absolute_uri()})


def _entry_page(request: HttpRequest, entry: CatalogEntry, form: ServerForm, status: int = 200) -> HttpResponse:
    tiers = [(t, TRUST_TIER_HELP[t], t == entry.trust_tier, entry.tier_caveat(t)) for t in TrustTier]
    return render(request, "web/servers/catalog_entry.html", {
        "entry": entry, "form": form, "tiers": tiers, "admins": server_admins(request),
        "catalog_url": request.build_absolute_uri()}, status=status)


@member_required()
def catalog_register(request: HttpRequest, key: str) -> HttpResponse:
    entry = catalog_entry(key)
    if entry is None:
        raise NotFound("No such catalog entry.")
    if request.method != "POST":
        return _entry_page(request, entry, ServerForm(initial=initial_data(entry)))
    request.actor.require("servers.manage")
    # One click posts only `as_suggested`: the entry's own fields, validated like typed ones.
    form = ServerForm(initial_data(entry) if request.POST.get("as_suggested") else request.POST)
    if not form.is_valid():
        return _entry_page(request, entry, form, status=422)
    try:
        server = services.create_server(actor=request.actor, **form.service_fields())
    except ValidationFailed as exc:
        apply_domain_errors(form, exc)
        return _entry_page(request, entry, form, status=422)
    except Conflict as exc:
        form.add_error("name", f"{exc.message} Choose another name.")
        return _entry_page(request, entry, form, status=422)
    messages.success(request, f"Server “{server.name}” registered from the catalog; syncing now.")
    return redirect("web:server", server_id=server.id)
