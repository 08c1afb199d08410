"""Importing servers from a config an admin already has (apps/registry/imports.py): paste or upload, preview
what each entry would become, and register the chosen ones in one confirmation."""

from __future__ import annotations

import json

from cryptography.fernet import InvalidToken
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.core.encryption import encrypt, keyring
from apps.core.errors import ValidationFailed
from apps.registry import imports
from apps.registry.models import TrustTier
from apps.web.access import member_required

MAX_UPLOAD_BYTES = imports.MAX_CONFIG_CHARS
SEAL_TTL_S = 3600  # how long a preview can be confirmed


def _seal(request: HttpRequest, text: str) -> str:
    """The previewed config as it travels to the confirmation: encrypted, so the secrets in it are never in
    the page's HTML, and bound to the organisation; nothing of it is stored server-side until an entry is
    registered (encrypted, by create_server)."""
    return encrypt(json.dumps({"org": str(request.actor.org_id), "config": text}))


def _unseal(request: HttpRequest) -> str:
    try:
        data = json.loads(keyring().decrypt(request.POST.get("sealed", "").encode(), ttl=SEAL_TTL_S))
    except (InvalidToken, ValueError):
        data = {}
    if data.get("org") != str(request.actor.org_id):
        message = "This preview has expired: paste the config again."
        raise ValidationFailed(message, {"config": message})
    return data["config"]


def _config_text(request: HttpRequest) -> str:
    if request.POST.get("action") == "confirm":
        return _unseal(request)
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ValidationFailed("The file is too large.", {"config": "The file is too large."})
        try:
            return upload.read().decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValidationFailed("Not UTF-8 text.", {"config": "The file is not UTF-8 text."}) from None
    return request.POST.get("config", "")


def _page(request: HttpRequest, status: int = 200, **context) -> HttpResponse:
    return render(request, "web/servers/import.html", {"tiers": TrustTier.choices, **context}, status=status)


@member_required("servers.manage")
def server_import(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    try:
        text = _config_text(request)
        kind, entries = imports.preview(org_id=request.actor.org_id, text=text)
    except ValidationFailed as exc:
        return _page(request, status=422, error=exc.errors.get("config") or exc.message,
                     config=request.POST.get("config", ""))
    if request.POST.get("action") != "confirm":
        return _page(request, kind=kind, entries=entries, sealed=_seal(request, text))
    chosen = request.POST.getlist("select")
    results = imports.import_servers(
        actor=request.actor, text=text, select=chosen,
        rename={n: request.POST.get(f"rename-{n}", "").strip() for n in chosen},
        tiers={n: request.POST.get(f"tier-{n}", "") for n in chosen})
    registered = [r for r in results if r.ok]
    if registered and len(registered) == len(results):
        messages.success(request, f"Imported {len(registered)} server{'s' * (len(registered) != 1)}; syncing now.")
        return redirect("web:servers")
    return _page(request, status=200 if registered else 422, kind=kind, entries=entries, sealed=_seal(request, text),
                 results=results, done={r.entry for r in results if r.ok})
