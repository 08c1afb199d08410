"""Settings → MCP gateway: keys bound to an agent (create: shown once with the host config to
paste; revoke; last used) for outside MCP hosts such as Claude Desktop and Cursor, and beside them
the hosts connected with OAuth (the agent a person picked on the consent page; revoke)."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.agents import selectors as agents
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.gateway import selectors, services
from apps.gateway.models import DEFAULT_HOLD_WAIT_S, DEFAULT_RATE_LIMIT
from apps.web.access import member_required, post_only
from apps.web.forms import apply_domain_errors


class CreateGatewayKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Which host uses it, e.g. 'Ada's Claude Desktop'.")
    agent = forms.ChoiceField(help_text="The key sees and may call exactly this agent's tools, by its grants.")
    rate_limit_per_minute = forms.IntegerField(min_value=1, max_value=services.MAX_RATE_LIMIT,
                                               initial=DEFAULT_RATE_LIMIT, label="Calls per minute")
    hold_wait_s = forms.IntegerField(min_value=0, max_value=services.MAX_HOLD_WAIT_S, initial=DEFAULT_HOLD_WAIT_S,
                                     label="Wait for an approval (seconds)",
                                     help_text="How long a held call stays open while a person decides.")

    def __init__(self, *args, org_id, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [(str(a.id), a.name) for a in agents.org_agents(org_id=org_id)]


def host_config(url: str, raw: str) -> dict[str, str]:
    """What to paste into a host: Streamable HTTP with the bearer header, or the mcp-remote bridge."""
    http = {"mcpServers": {"airlock": {"type": "http", "url": url,
                                       "headers": {"Authorization": f"Bearer {raw}"}}}}
    stdio = {"mcpServers": {"airlock": {"command": "npx", "args": [
        "mcp-remote", url, "--header", f"Authorization: Bearer {raw}"]}}}
    return {"http_json": json.dumps(http, indent=2), "stdio_json": json.dumps(stdio, indent=2),
            "mcp_remote": f'npx mcp-remote {url} --header "Authorization: Bearer {raw}"'}


def _page(request: HttpRequest, form: CreateGatewayKeyForm, created=None, status: int = 200) -> HttpResponse:
    url = settings.AIRLOCK_GATEWAY_URL
    context = {"keys": selectors.org_keys(org_id=request.actor.org_id), "form": form, "created": created,
               "grants": selectors.org_oauth_grants(org_id=request.actor.org_id),
               "gateway_url": url, "config": host_config(url, created[1]) if created else None}
    template = "web/settings/gateway_keys.html#gateway-panel" if request.htmx else "web/settings/gateway_keys.html"
    return render(request, template, context, status=status)


@member_required("tokens.manage")
def gateway_keys(request: HttpRequest) -> HttpResponse:
    org_id = request.actor.org_id
    if request.method != "POST":
        return _page(request, CreateGatewayKeyForm(org_id=org_id))
    form = CreateGatewayKeyForm(request.POST, org_id=org_id)
    if not form.is_valid():
        return _page(request, form, status=422)
    data = form.cleaned_data
    try:
        key, raw = services.create_key(actor=request.actor, name=data["name"], agent_id=data["agent"],
                                       rate_limit_per_minute=data["rate_limit_per_minute"],
                                       hold_wait_s=data["hold_wait_s"])
    except (ValidationFailed, PermissionDenied) as exc:
        apply_domain_errors(form, exc if isinstance(exc, ValidationFailed) else ValidationFailed(exc.message))
        return _page(request, form, status=422)
    return _page(request, CreateGatewayKeyForm(org_id=org_id), created=(key, raw))


@post_only
@member_required("tokens.manage")
def revoke_gateway_key(request: HttpRequest, key_id) -> HttpResponse:
    key = services.revoke_key(actor=request.actor, key_id=key_id)
    messages.success(request, f"Gateway key “{key.name}” revoked; the gateway refuses it within a second.")
    if request.htmx:
        return _page(request, CreateGatewayKeyForm(org_id=request.actor.org_id))
    return redirect("web:gateway_keys")


@post_only
@member_required("tokens.manage")
def revoke_oauth_grant(request: HttpRequest, grant_id) -> HttpResponse:
    grant = services.revoke_oauth_grant(actor=request.actor, grant_id=grant_id)
    messages.success(request, f"OAuth access of “{grant.client_name}” revoked; its tokens no longer work.")
    if request.htmx:
        return _page(request, CreateGatewayKeyForm(org_id=request.actor.org_id))
    return redirect("web:gateway_keys")
