"""MCP servers, their tools and resources: list, register, detail with sync, tool and resource review (pin, risk,
state, trusted output)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.approvals.definition_changes import inbox
from apps.core.encryption import decrypt, encrypt
from apps.core.errors import Conflict, ValidationFailed
from apps.registry import resources, selectors, services
from apps.registry.definitions import OUTSIDE
from apps.registry.models import TRUST_TIER_HELP, Risk, ServerStatus, ToolState, Transport, TrustTier
from apps.registry.oauth import Pending
from apps.web.access import member_required, post_only
from apps.web.forms import apply_domain_errors
from apps.web.tables import sorted_page


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _pairs(text: str, sep: str) -> dict[str, str] | None:
    """`KEY=value` (or `Name: value`) lines to a dict; empty text means "keep what is stored"."""
    lines = _lines(text)
    if not lines:
        return None
    return {k.strip(): v.strip() for k, _, v in (line.partition(sep) for line in lines)}


class ServerForm(forms.Form):
    name = forms.CharField(max_length=32, help_text="Lowercase; tools are called name.tool.")
    description = forms.CharField(max_length=300, required=False)
    transport = forms.ChoiceField(choices=Transport.choices, initial=Transport.STDIO)
    trust_tier = forms.ChoiceField(choices=TrustTier.choices, initial=TrustTier.THIRD_PARTY)
    command = forms.CharField(max_length=500, required=False, help_text="stdio: the program to start.")
    args = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                           help_text="stdio: one argument per line (no shell).")
    cwd = forms.CharField(max_length=500, required=False, label="Working directory")
    env = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Environment",
                          help_text="KEY=value per line. Write-only: leave empty to keep the stored values.")
    url = forms.CharField(max_length=500, required=False, label="URL", help_text="http: the Streamable HTTP endpoint.")
    headers = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="Name: value per line. Write-only: leave empty to keep.")
    bearer_token = forms.CharField(required=False, widget=forms.PasswordInput,
                                   help_text="Write-only: leave empty to keep the stored token.")
    outside_content = forms.BooleanField(
        required=False, label="Its tools return text written outside your organisation",
        help_text="Emails, tickets, chat, customers' notes, web pages. Reading a result then taints a run, so later "
                  "writes wait for a person, whatever the tier says.")

    def service_fields(self) -> dict:
        data = dict(self.cleaned_data)
        data["args"] = _lines(data["args"])
        data["env"] = _pairs(data["env"], "=")
        data["headers"] = _pairs(data["headers"], ":")
        return data


SERVER_COLUMNS = [("name", "Name", "name"), ("status", "Status", "status"), ("tier", "Tier", "trust_tier"),
                  ("tools", "Tools by risk", "n_tools"), ("synced", "Last sync", "last_synced_at")]


def _list_page(request: HttpRequest, form: ServerForm, status: int = 200) -> HttpResponse:
    rows = selectors.servers_for_org(org_id=request.actor.org_id)
    q, tier, state = (request.GET.get(k, "").strip() for k in ("q", "tier", "status"))
    if q:
        rows = rows.filter(name__icontains=q)
    if tier:
        rows = rows.filter(trust_tier=tier)
    if state:
        rows = rows.filter(status=state)
    context = {"table": sorted_page(request, rows, columns=SERVER_COLUMNS, default="name",
                                    filters=("q", "tier", "status")),
               "form": form, "tiers": [(t, TRUST_TIER_HELP[t]) for t in TrustTier],
               "filters": {"q": q, "tier": tier, "status": state}, "statuses": ServerStatus.choices}
    return render(request, "web/servers/list.html", context, status=status)


@member_required()
def servers(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _list_page(request, ServerForm())
    request.actor.require("servers.manage")
    form = ServerForm(request.POST)
    if not form.is_valid():
        return _list_page(request, form, status=422)
    try:
        server = services.create_server(actor=request.actor, **form.service_fields())
    except ValidationFailed as exc:
        apply_domain_errors(form, exc)
        return _list_page(request, form, status=422)
    except Conflict as exc:
        form.add_error("name", f"{exc.message} Choose another name.")
        return _list_page(request, form, status=422)
    messages.success(request, f"Server “{server.name}” registered; syncing now.")
    return redirect("web:server", server_id=server.id)


def _detail_context(request: HttpRequest, server_id) -> dict:
    server = selectors.get_server(org_id=request.actor.org_id, server_id=server_id)
    tools = selectors.tools_for_org(org_id=request.actor.org_id, server=server.id)
    syncing = server.status == ServerStatus.SYNCING
    return {"server": server, "tools": tools, "syncing": syncing,
            "resources": selectors.resources_for_org(org_id=request.actor.org_id, server=server.id),
            # a new server's first sync is queued on registration: watch for it too
            "polling": syncing or (server.status == ServerStatus.NEW and server.enabled),
            "tier_help": TRUST_TIER_HELP.get(server.trust_tier, ""),
            "can_manage": request.actor.can("servers.manage"),
            "trusted": selectors.trusted_output_setting(server),
            "outside": selectors.outside_content_setting(server)}


def _detail(request: HttpRequest, server_id, template: str = "web/servers/detail.html") -> HttpResponse:
    return render(request, template, _detail_context(request, server_id))


@member_required()
def server(request: HttpRequest, server_id) -> HttpResponse:
    return _detail(request, server_id)


@member_required()
def server_status(request: HttpRequest, server_id) -> HttpResponse:
    """The status card alone: polled by htmx while a sync runs. When the sync is over, the
    whole page reloads so the tools it found appear too."""
    context = _detail_context(request, server_id)
    response = render(request, "web/servers/detail.html#server-status", context)
    if request.htmx and not context["polling"]:
        response["HX-Refresh"] = "true"
    return response


def _edit_page(request: HttpRequest, server, form: ServerForm, status: int = 200) -> HttpResponse:
    return render(request, "web/servers/edit.html", {
        "server": server, "form": form, "tiers": [(t, TRUST_TIER_HELP[t]) for t in TrustTier],
        "stored_env": server.env_keys, "stored_headers": server.header_keys}, status=status)


@member_required("servers.manage")
def server_edit(request: HttpRequest, server_id) -> HttpResponse:
    """The register form again, filled in; secrets are write-only (blank keeps the stored ones). Saving goes
    through the same service as the API's PATCH, so a changed definition re-syncs and re-pins the same way."""
    server = selectors.get_server(org_id=request.actor.org_id, server_id=server_id)
    if request.method != "POST":
        initial = {k: getattr(server, k) for k in ("name", "description", "transport", "trust_tier", "command",
                                                    "cwd", "url", "outside_content")}
        return _edit_page(request, server, ServerForm(initial={**initial, "args": "\n".join(server.args)}))
    form = ServerForm(request.POST)
    if not form.is_valid():
        return _edit_page(request, server, form, status=422)
    fields = form.service_fields()
    outside = fields.pop("outside_content")
    try:
        saved = services.update_server(actor=request.actor, server_id=server.id, **fields, review=inbox)
        if outside != server.outside_content:  # its own service and audit row; unticked keeps a "trusted" mark
            services.set_output_trust(actor=request.actor, server_id=server.id, trust=OUTSIDE if outside else "",
                                      review=inbox)
    except ValidationFailed as exc:
        apply_domain_errors(form, exc)
        return _edit_page(request, server, form, status=422)
    except Conflict as exc:
        form.add_error("name", f"{exc.message} Choose another name.")
        return _edit_page(request, server, form, status=422)
    messages.success(request, f"Server “{saved.name}” saved; syncing it again to check its tools."
                     if saved.enabled else f"Server “{saved.name}” saved.")
    return redirect("web:server", server_id=saved.id)


@post_only
@member_required("servers.manage")
def server_sync(request: HttpRequest, server_id) -> HttpResponse:
    services.request_sync(actor=request.actor, server_id=server_id)
    if request.htmx:
        return _detail(request, server_id, "web/servers/detail.html#server-status")
    return redirect("web:server", server_id=server_id)


@post_only
@member_required("servers.manage")
def server_requests(request: HttpRequest, server_id) -> HttpResponse:
    """What the server may ask during a call: elicitation, sampling, and whether sampling waits for a person."""
    services.set_server_requests(actor=request.actor, server_id=server_id,
                                 **{k: request.POST.get(k) == "on"
                                    for k in ("allow_elicitation", "allow_sampling", "hold_sampling")})
    messages.success(request, "Saved what this server may ask during a call.")
    return redirect("web:server", server_id=server_id)


@post_only
@member_required("servers.manage")
def server_toggle(request: HttpRequest, server_id) -> HttpResponse:
    current = selectors.get_server(org_id=request.actor.org_id, server_id=server_id)
    services.set_server_enabled(actor=request.actor, server_id=server_id, enabled=not current.enabled, review=inbox)
    return redirect("web:server", server_id=server_id)


@post_only
@member_required("servers.manage")
def server_trusted_output(request: HttpRequest, server_id) -> HttpResponse:
    trusted = request.POST.get("trusted") == "1"
    services.set_trusted_output(actor=request.actor, server_id=server_id, trusted=trusted, review=inbox)
    messages.success(request, "Output marked trusted: its results no longer taint a run by where they come from."
                     if trusted else "Output no longer trusted: its results taint a run again as their source says.")
    return redirect("web:server", server_id=server_id)


@post_only
@member_required("servers.manage")
def tool_trusted_output(request: HttpRequest, tool_id) -> HttpResponse:
    trusted = request.POST.get("trusted") == "1"
    services.set_trusted_output(actor=request.actor, tool_id=tool_id, trusted=trusted, review=inbox)
    messages.success(request, "Output marked trusted." if trusted else "Output no longer trusted.")
    return redirect("web:tool", tool_id=tool_id)


OUTSIDE_ON = ("Marked outside content: reading one of its results taints a run, so later writes and open-world "
              "reads wait for a person.")
OUTSIDE_OFF = "No longer marked outside content: its tier and hints decide again."


@post_only
@member_required("servers.manage")
def server_outside_content(request: HttpRequest, server_id) -> HttpResponse:
    outside = request.POST.get("outside") == "1"
    services.set_output_trust(actor=request.actor, server_id=server_id, trust=OUTSIDE if outside else "", review=inbox)
    messages.success(request, OUTSIDE_ON if outside else OUTSIDE_OFF)
    return redirect("web:server", server_id=server_id)


@post_only
@member_required("servers.manage")
def tool_outside_content(request: HttpRequest, tool_id) -> HttpResponse:
    outside = request.POST.get("outside") == "1"
    services.set_output_trust(actor=request.actor, tool_id=tool_id, trust=OUTSIDE if outside else "", review=inbox)
    messages.success(request, OUTSIDE_ON if outside else OUTSIDE_OFF)
    return redirect("web:tool", tool_id=tool_id)


@post_only
@member_required("servers.manage")
def server_delete(request: HttpRequest, server_id) -> HttpResponse:
    services.delete_server(actor=request.actor, server_id=server_id)
    messages.success(request, "Server deleted.")
    return redirect("web:servers")


def _tool_page(request: HttpRequest, tool_id, status: int = 200, error: str = "") -> HttpResponse:
    tool = selectors.get_tool(org_id=request.actor.org_id, tool_id=tool_id)
    context = {"tool": tool, "diff": services.tool_diff(tool), "risks": Risk.choices, "error": error,
               "trusted": selectors.trusted_output_setting(tool),
               "server_trusted": selectors.trusted_output_setting(tool.server),
               "outside": selectors.outside_content_setting(tool),
               "server_outside": selectors.outside_content_setting(tool.server),
               "states": [(s, label) for s, label in ToolState.choices if s != ToolState.REMOVED]}
    return render(request, "web/servers/tool.html", context, status=status)


@member_required()
def tool(request: HttpRequest, tool_id) -> HttpResponse:
    return _tool_page(request, tool_id)


@post_only
@member_required("servers.manage")
def tool_pin(request: HttpRequest, tool_id) -> HttpResponse:
    services.pin_tool(actor=request.actor, tool_id=tool_id, review=inbox)
    messages.success(request, "Definition pinned: the tool is usable again.")
    return redirect("web:tool", tool_id=tool_id)


@post_only
@member_required("servers.manage")
def tool_update(request: HttpRequest, tool_id) -> HttpResponse:
    current = selectors.get_tool(org_id=request.actor.org_id, tool_id=tool_id)
    risk, state = request.POST.get("risk") or None, request.POST.get("state") or None
    try:
        services.update_tool(actor=request.actor, tool_id=tool_id, risk=risk if risk != current.risk else None,
                             state=state if state != current.state else None, review=inbox)
    except ValidationFailed as exc:
        return _tool_page(request, tool_id, status=422, error=exc.message)
    messages.success(request, "Tool updated.")
    return redirect("web:tool", tool_id=tool_id)


def _resource_page(request: HttpRequest, resource_id, status: int = 200, error: str = "") -> HttpResponse:
    resource = selectors.get_resource(org_id=request.actor.org_id, resource_id=resource_id)
    context = {"resource": resource, "diff": resources.resource_diff(resource), "error": error,
               "trusted": selectors.trusted_output_setting(resource),
               "server_trusted": selectors.trusted_output_setting(resource.server),
               "states": [(s, label) for s, label in ToolState.choices if s != ToolState.REMOVED]}
    return render(request, "web/servers/resource.html", context, status=status)


@member_required()
def resource(request: HttpRequest, resource_id) -> HttpResponse:
    return _resource_page(request, resource_id)


@post_only
@member_required("servers.manage")
def resource_pin(request: HttpRequest, resource_id) -> HttpResponse:
    resources.pin_resource(actor=request.actor, resource_id=resource_id, review=inbox)
    messages.success(request, "Definition pinned: the resource can be given to agents again.")
    return redirect("web:resource", resource_id=resource_id)


@post_only
@member_required("servers.manage")
def resource_state(request: HttpRequest, resource_id) -> HttpResponse:
    try:
        resources.set_resource_state(actor=request.actor, resource_id=resource_id,
                                     state=request.POST.get("state", ""), review=inbox)
    except ValidationFailed as exc:
        return _resource_page(request, resource_id, status=422, error=exc.message)
    messages.success(request, "Resource updated.")
    return redirect("web:resource", resource_id=resource_id)


@post_only
@member_required("servers.manage")
def resource_trusted_output(request: HttpRequest, resource_id) -> HttpResponse:
    trusted = request.POST.get("trusted") == "1"
    resources.set_resource_trusted_output(actor=request.actor, resource_id=resource_id, trusted=trusted, review=inbox)
    messages.success(request, "Content marked trusted: reading it no longer taints a run by where it comes from."
                     if trusted else "Content no longer trusted: reading it taints a run again.")
    return redirect("web:resource", resource_id=resource_id)


# --- OAuth: Airlock authorizes itself with the server's authorization server (apps/registry/oauth.py) -----

OAUTH_SESSION_KEY = "server_oauth_pending"


@post_only
@member_required("servers.manage")
def server_authorize(request: HttpRequest, server_id) -> HttpResponse:
    """Starts (or restarts) the OAuth flow: discovery and registration, then a page whose link sends the
    admin's browser to the authorization server. What the callback needs (PKCE verifier, state, the client
    registration) stays in this admin's session."""
    from django.urls import reverse

    try:
        pending = services.begin_authorization(
            actor=request.actor, server_id=server_id,
            redirect_uri=request.build_absolute_uri(reverse("web:server_oauth_callback")),
            client_id=request.POST.get("client_id", "").strip(),
            client_secret=request.POST.get("client_secret", "").strip())
    except ValidationFailed as exc:
        messages.error(request, " ".join(str(v) for v in exc.errors.values()))
        return redirect("web:server", server_id=server_id)
    # Encrypted: it carries the PKCE verifier and, for a pre-registered confidential client, its secret.
    request.session[OAUTH_SESSION_KEY] = encrypt(json.dumps(pending.as_dict()))
    # A page with a link, not a redirect: browsers hold a form's redirects to CSP form-action ('self'), and
    # the admin sees where they are sent before they go.
    server = selectors.get_server(org_id=request.actor.org_id, server_id=server_id)
    return render(request, "web/servers/authorize.html", {
        "server": server, "issuer": pending.metadata.get("issuer", ""), "scope": pending.scope,
        "authorization_url": pending.authorization_url})


@member_required("servers.manage")
def server_oauth_callback(request: HttpRequest) -> HttpResponse:
    """Where the authorization server sends the admin's browser back. Only the pending flow of this session
    (same state) is completed; it is used once."""

    stored = request.session.pop(OAUTH_SESSION_KEY, None)
    if not stored:
        messages.error(request, "No authorization was under way in this session: start it from the server's page.")
        return redirect("web:servers")
    try:
        pending = Pending(**json.loads(decrypt(stored)))
    except Exception:  # a key rotated mid-flow: start again
        messages.error(request, "The authorization under way can no longer be read: start it again.")
        return redirect("web:servers")
    if request.GET.get("error"):
        messages.error(request, f"The authorization server refused: {request.GET.get('error')[:100]}.")
        return redirect("web:server", server_id=pending.server_id)
    try:
        services.complete_authorization(actor=request.actor, pending=pending, code=request.GET.get("code", ""),
                                        state=request.GET.get("state", ""), iss=request.GET.get("iss"))
    except ValidationFailed as exc:
        messages.error(request, " ".join(str(v) for v in exc.errors.values()))
        return redirect("web:server", server_id=pending.server_id)
    messages.success(request, "Airlock is authorized with this server; syncing its tools now.")
    return redirect("web:server", server_id=pending.server_id)
