"""The only writers of servers and tools. Each write is one transaction with its audit row;
realtime events and sync tasks go out after commit. Secrets (env values, headers) are stored
encrypted and never written to audit data, events or errors (only their keys). Each saved tool is
told to the caller's `review` in the same transaction (apps.registry.review: the inbox's items).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.audit import services as audit
from apps.audit.org_secrets import redact_outside
from apps.core.egress import save_time_error
from apps.core.errors import Conflict, ValidationFailed
from apps.core.realtime import org_group, publish_after_commit
from apps.registry import oauth, resources, selectors
from apps.registry.connection import Discovery, ServerUnreachable, run_discovery, spec_for
from apps.registry.connection import run_to_completion as run_async
from apps.registry.definitions import (
    OUTSIDE,
    RISK_ORDER,
    TRUSTED,
    canonical_definition,
    classify_risk,
    definition_diff,
    definition_hash,
    qualified_name,
    server_name_error,
    tool_name_error,
)
from apps.registry.models import (
    McpServer,
    Risk,
    RiskSource,
    ServerStatus,
    Severity,
    Tool,
    ToolState,
    Transport,
    TrustTier,
)
from apps.registry.review import DefinitionReview
from apps.registry.scanner import scan_definition, scan_server

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
HEADER_KEY_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
TRUSTED_TIERS = (TrustTier.OFFICIAL, TrustTier.INTERNAL)
EDITABLE = ("name", "description", "transport", "command", "args", "env", "cwd", "url", "headers", "trust_tier",
            "enabled", "timeout_s")
AWAITING_PIN = "New tool of a third-party server: waiting for an admin to review and pin it."
DRIFTED = "Its definition changed since it was pinned: review the diff and pin it again."


# --- servers ------------------------------------------------------------------------------------

def _string_map(value: Any, field_name: str, key_re: re.Pattern[str], errors: dict[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        errors[field_name] = "Give a map of names to text values."
        return {}
    bad = [k for k in value if not key_re.match(str(k))]
    if bad:
        errors[field_name] = f"Invalid name: {bad[0]!r}."
    return {str(k): v for k, v in value.items()}


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    """Checks a full set of server fields. Raises ValidationFailed with field names."""
    errors: dict[str, str] = {}
    data["name"] = (data.get("name") or "").strip()
    if message := server_name_error(data["name"]):
        errors["name"] = message
    if data.get("transport") not in (Transport.STDIO, Transport.HTTP):  # `builtin` is Airlock's own
        errors["transport"] = "Choose stdio or http."
    if data.get("trust_tier") not in TrustTier.values:
        errors["trust_tier"] = "Choose official, internal or third_party."
    args = data.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        errors["args"] = "Give the arguments as a list of strings."
    data["args"] = args if isinstance(args, list) else []
    data["env"] = _string_map(data.get("env"), "env", ENV_KEY_RE, errors)
    data["headers"] = _string_map(data.get("headers"), "headers", HEADER_KEY_RE, errors)
    if not 1 <= int(data.get("timeout_s") or 30) <= 300:
        errors["timeout_s"] = "Between 1 and 300 seconds."
    for column in ("command", "cwd", "url"):  # the columns' limits, checked here on every database
        limit = McpServer._meta.get_field(column).max_length
        if len(data.get(column) or "") > limit:
            errors[column] = f"At most {limit} characters."
    if data.get("transport") == Transport.STDIO:
        if not (data.get("command") or "").strip():
            errors["command"] = "A stdio server needs a command."
        data["url"] = ""
    elif data.get("transport") == Transport.HTTP:
        url = (data.get("url") or "").strip()
        if not re.match(r"^https?://[^/\s]+", url):
            errors["url"] = "Give an http:// or https:// URL of the server's MCP endpoint."
        elif message := save_time_error(url):
            errors["url"] = message
        data["url"], data["command"], data["args"], data["cwd"], data["env"] = url, "", [], "", {}
    if errors:
        raise ValidationFailed("; ".join(f"{k}: {v}" for k, v in errors.items()), errors)
    return data


def _audit_view(server: McpServer) -> dict[str, Any]:
    return {"name": server.name, "transport": server.transport, "trust_tier": server.trust_tier,
            "command": server.command, "args": server.args, "url": server.url, "enabled": server.enabled,
            "env_keys": server.env_keys, "header_keys": server.header_keys}


def _enqueue_sync(server: McpServer) -> None:
    from apps.registry import tasks  # tasks call services; import here to keep the cycle lazy

    server_id = str(server.id)
    transaction.on_commit(lambda: tasks.sync_server.delay(server_id))


def _save_server(server: McpServer, *, fields: list[str] | None = None) -> None:
    try:
        with transaction.atomic():
            server.save(update_fields=fields) if fields else server.save()
    except IntegrityError:
        raise Conflict(f"A server named {server.name!r} already exists in this organisation.") from None


def create_server(*, actor: Actor, name: str, transport: str, trust_tier: str, command: str = "",
                  args: list[str] | None = None, env: dict[str, str] | None = None, cwd: str = "", url: str = "",
                  headers: dict[str, str] | None = None, bearer_token: str = "", description: str = "",
                  enabled: bool = True, timeout_s: int = 30, sync: bool = True,
                  outside_content: bool = False) -> McpServer:
    """Registers a server. Writes McpServer + `server.created` audit; enqueues a sync on commit.
    `outside_content`: its tools return text written outside the organisation (see `set_output_trust`;
    audited as that mark is).

    Raises PermissionDenied, ValidationFailed (field errors), Conflict (name taken).
    """
    actor.require("servers.manage")
    headers = dict(headers or {})
    if bearer_token:
        headers["Authorization"] = f"Bearer {bearer_token}"
    data = _clean({"name": name, "transport": transport, "trust_tier": trust_tier, "command": command,
                   "args": args, "env": env, "cwd": cwd, "url": url, "headers": headers, "timeout_s": timeout_s})
    if selectors.get_server_by_name(org_id=actor.org_id, name=data["name"]):
        raise Conflict(f"A server named {data['name']!r} already exists in this organisation.")
    with transaction.atomic():
        server = McpServer(org_id=actor.org_id, description=description, enabled=enabled, **data,
                           outside_content=outside_content,
                           status=ServerStatus.NEW if enabled else ServerStatus.DISABLED)
        # Elicitation and sampling stay off until an admin turns them on for this server: a server that may
        # ask gets a session of its own for each call (seconds for a stdio server) instead of the shared pool.
        _save_server(server)
        audit.record(org_id=actor.org_id, actor=actor, action="server.created", target=server,
                     target_label=server.name, data=_audit_view(server))
        if outside_content:  # the mark's own audit row, as set_output_trust writes it: who marked it shows
            audit.record(org_id=actor.org_id, actor=actor, action="server.outside_content_changed", target=server,
                         target_label=server.name, data={"from": False, "to": True})
        if enabled and sync:
            _enqueue_sync(server)
    return server


def update_server(*, actor: Actor, server_id: UUID | str, review: DefinitionReview, bearer_token: str = "",
                  sync: bool = True, **changes: Any) -> McpServer:
    """Edits a server. `env`/`headers` given replace the stored maps (None keeps them).

    Writes McpServer + `server.updated` audit (changed field names only); renames requalify its
    tools (each told to `review`); enqueues a sync on commit. Raises PermissionDenied, NotFound,
    ValidationFailed, Conflict.
    """
    actor.require("servers.manage")
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValidationFailed(f"Unknown fields: {', '.join(sorted(unknown))}.", dict.fromkeys(unknown, "Unknown."))
    changes = {k: v for k, v in changes.items() if v is not None}
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=selectors.get_server(
            org_id=actor.org_id, server_id=server_id).pk)
        current = {k: getattr(server, k) for k in EDITABLE}
        if bearer_token:
            changes["headers"] = {**(changes.get("headers") or current["headers"] or {}),
                                  "Authorization": f"Bearer {bearer_token}"}
        data = _clean({**current, **changes})
        changed = sorted(k for k in EDITABLE if data.get(k, current[k]) != current[k])
        for key in changed:
            setattr(server, key, data[key])
        if "enabled" in changed:
            server.status = ServerStatus.NEW if server.enabled else ServerStatus.DISABLED
        if server.oauth and ({"url", "transport"} & set(changed)):
            # Tokens were issued for the old resource: never send them anywhere else
            server.oauth = server.oauth_secrets = None
            changed.append("oauth")
        _save_server(server)
        if "name" in changed:
            for tool in server.tools.all():
                tool.qualified_name = qualified_name(server.name, tool.name)
                tool.save(update_fields=["qualified_name", "updated_at"])
                review.tool_saved(tool)
        audit.record(org_id=actor.org_id, actor=actor, action="server.updated", target=server,
                     target_label=server.name, data={"changed": changed, **_audit_view(server)})
        if changed and server.enabled and sync:
            _enqueue_sync(server)
    return server


def set_server_requests(*, actor: Actor, server_id: UUID | str, allow_elicitation: bool | None = None,
                        allow_sampling: bool | None = None, hold_sampling: bool | None = None) -> McpServer:
    """What the server may ask of Airlock during a call: elicitation (a form in the inbox), sampling (a run of
    the calling agent's model, counted to its run) and whether sampling waits for a person first. None keeps a
    setting. Writes McpServer + `server.requests_changed` audit. Raises PermissionDenied, NotFound."""
    actor.require("servers.manage")
    wanted = {"allow_elicitation": allow_elicitation, "allow_sampling": allow_sampling,
              "hold_sampling": hold_sampling}
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=selectors.get_server(
            org_id=actor.org_id, server_id=server_id).pk)
        changed = sorted(k for k, v in wanted.items() if v is not None and bool(v) != getattr(server, k))
        for key in changed:
            setattr(server, key, bool(wanted[key]))
        if changed:
            server.save(update_fields=[*changed, "updated_at"])
            audit.record(org_id=actor.org_id, actor=actor, action="server.requests_changed", target=server,
                         target_label=server.name, data={k: getattr(server, k) for k in wanted})
    return server


def set_server_enabled(*, actor: Actor, server_id: UUID | str, enabled: bool, review: DefinitionReview) -> McpServer:
    """Enables or disables a server (its tools become unusable while disabled). Audited."""
    return update_server(actor=actor, server_id=server_id, enabled=enabled, review=review)


def delete_server(*, actor: Actor, server_id: UUID | str) -> None:
    """Deletes a server and its tools. Writes a `server.deleted` audit row. Raises NotFound."""
    actor.require("servers.manage")
    with transaction.atomic():
        server = selectors.get_server(org_id=actor.org_id, server_id=server_id)
        audit.record(org_id=actor.org_id, actor=actor, action="server.deleted", target=server,
                     target_label=server.name, data={**_audit_view(server), "tools": server.tools.count()})
        server.delete()
    publish_after_commit(org_group(actor.org_id), "server.deleted", server_id=str(server_id))


def set_trusted_output(*, actor: Actor, trusted: bool, review: DefinitionReview, server_id: UUID | str | None = None,
                       tool_id: UUID | str | None = None) -> McpServer | Tool:
    """An admin vouches (or stops vouching) for what a server's tools, or one tool, return: trusted output
    does not taint a run by where it came from (a scanner finding in it still does). `set_output_trust`
    with "trusted" or "" (marking trusted clears "outside content")."""
    current = _output_target(actor, server_id=server_id, tool_id=tool_id, lock=False)
    trust = TRUSTED if trusted else (OUTSIDE if current.outside_content else "")
    return set_output_trust(actor=actor, trust=trust, review=review, server_id=server_id, tool_id=tool_id)


def set_output_trust(*, actor: Actor, trust: str, review: DefinitionReview, server_id: UUID | str | None = None,
                     tool_id: UUID | str | None = None) -> McpServer | Tool:
    """What an admin says of a server's (or one tool's) results: "trusted" (they do not taint a run by where
    they came from), "outside" (text written outside the organisation, such as emails or tickets: reading one
    taints a run as a third-party result does, whatever the tier and hints say) or "" (the tier and hints
    decide). The two marks exclude each other.

    Writes McpServer or Tool (a tool told to `review`) + a `<kind>.trusted_output_changed` and/or
    `<kind>.outside_content_changed` audit row for each mark that changes. Raises PermissionDenied, NotFound,
    ValidationFailed (an unknown trust, or neither or both of server_id and tool_id).
    """
    actor.require("servers.manage")
    if trust not in ("", TRUSTED, OUTSIDE):
        raise ValidationFailed(f"Unknown output trust {trust!r}.",
                               {"trust": f"Choose {TRUSTED!r}, {OUTSIDE!r} or '' (by tier and hints)."})
    with transaction.atomic():
        target = _output_target(actor, server_id=server_id, tool_id=tool_id, lock=True)
        kind = "server" if isinstance(target, McpServer) else "tool"
        label = target.name if kind == "server" else target.qualified_name
        changed = []
        for field, action, wanted in (("trusted_output", "trusted_output_changed", trust == TRUSTED),
                                      ("outside_content", "outside_content_changed", trust == OUTSIDE)):
            if getattr(target, field) != wanted:
                audit.record(org_id=actor.org_id, actor=actor, action=f"{kind}.{action}", target=target,
                             target_label=label, data={"from": not wanted, "to": wanted})
                setattr(target, field, wanted)
                changed.append(field)
        if changed:
            target.save(update_fields=[*changed, "updated_at"])
            if isinstance(target, Tool):
                review.tool_saved(target)
    if tool_id is not None:
        publish_after_commit(org_group(actor.org_id), "tool.changed", tool_id=str(target.id))
    return target


def _output_target(actor: Actor, *, server_id: UUID | str | None, tool_id: UUID | str | None,
                   lock: bool) -> McpServer | Tool:
    if (server_id is None) == (tool_id is None):
        raise ValidationFailed("Name either a server or a tool to set the output trust of.",
                               {"target": "Give a server or a tool."})
    if server_id is not None:
        model, row = McpServer, selectors.get_server(org_id=actor.org_id, server_id=server_id)
    else:
        model, row = Tool, selectors.get_tool(org_id=actor.org_id, tool_id=tool_id)
    return model.objects.select_for_update().get(pk=row.pk) if lock else row


# --- sync ---------------------------------------------------------------------------------------

@dataclass
class SyncReport:
    status: str
    tools_added: int = 0
    tools_changed: int = 0
    tools_removed: int = 0
    protocol_version: str = ""
    error: str = ""
    quarantined: list[str] = field(default_factory=list)
    resources_quarantined: list[str] = field(default_factory=list)  # "server uri" of each


def sync_server(*, actor: Actor, server_id: UUID | str, review: DefinitionReview) -> SyncReport:
    """Connects to the server now and stores what it offers.

    Writes McpServer (status, protocol, capabilities, lists, last_error), Tool and Resource rows (added,
    changed, quarantined, removed; each told to `review` in the same transaction), `server.synced`/
    `server.sync_failed` and `tool.quarantined` audit rows; publishes `server.synced`. A failure is stored
    as a readable `last_error`, never raised. Raises PermissionDenied, NotFound, Conflict (server disabled).
    """
    actor.require("servers.manage")
    server = selectors.get_server(org_id=actor.org_id, server_id=server_id)
    if not server.enabled:
        raise Conflict(f"The server {server.name!r} is disabled; enable it before syncing.")
    if server.transport == Transport.BUILTIN:
        raise Conflict(f"{server.name!r} is built into Airlock: there is nothing to sync.")
    if server.transport == Transport.HTTP and server.oauth and not ensure_fresh_token(server):
        return SyncReport(status=ServerStatus.NEEDS_AUTH, error=server.last_error)
    McpServer.objects.filter(pk=server.pk).update(status=ServerStatus.SYNCING)
    try:
        discovery = run_discovery(spec_for(server))
    except ServerUnreachable as exc:
        if server.transport != Transport.HTTP or not _asks_for_oauth(server.url):
            return _record_failure(actor=actor, server_id=server.pk, message=str(exc))
        if not server.oauth:
            _mark_needs_authorization(server.pk, "The server asks for OAuth authorization: authorize Airlock "
                                                 "from the server's page.")
            return SyncReport(status=ServerStatus.NEEDS_AUTH, error=str(exc))
        # A token we held for good was refused (revoked at the provider, or rotated away by another
        # process's refresh): one refresh decides between "try again" and "a person must authorize".
        if not ensure_fresh_token(server, force=True):
            return SyncReport(status=ServerStatus.NEEDS_AUTH, error=server.last_error)
        try:
            discovery = run_discovery(spec_for(server))
        except ServerUnreachable as again:
            return _record_failure(actor=actor, server_id=server.pk, message=str(again))
    return _apply_discovery(actor=actor, server_id=server.pk, discovery=discovery, review=review)


# --- OAuth (apps/registry/oauth.py) -------------------------------------------------------------

def _asks_for_oauth(url: str) -> bool:
    try:
        return oauth.wants_oauth(run_async(oauth.probe(url)))
    except Exception:  # unreachable, refused by the egress guard: not an OAuth challenge
        return False


def _mark_needs_authorization(server_id: UUID, message: str) -> None:
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server_id)
        server.status, server.last_error = ServerStatus.NEEDS_AUTH, message
        server.save(update_fields=["status", "last_error", "updated_at"])
        audit.record(org_id=server.org_id, actor=None, action="server.needs_authorization", target=server,
                     target_label=server.name, data={"error": message[:500]})
    publish_after_commit(org_group(server.org_id), "server.synced", server_id=str(server_id))


def begin_authorization(*, actor: Actor, server_id: UUID | str, redirect_uri: str, client_id: str = "",
                        client_secret: str = "") -> oauth.Pending:
    """Discovers, registers Airlock as a client and returns what the browser is sent to. Writes nothing: the
    caller keeps `Pending` in the admin's session. Raises PermissionDenied, NotFound, ValidationFailed."""
    actor.require("servers.manage")
    server = selectors.get_server(org_id=actor.org_id, server_id=server_id)
    if server.transport != Transport.HTTP:
        message = "Only an HTTP server can use OAuth."
        raise ValidationFailed(message, {"transport": message})
    try:
        return run_async(oauth.begin(server_id=str(server.id), url=server.url, redirect_uri=redirect_uri,
                                     client_id=client_id, client_secret=client_secret,
                                     timeout=float(server.timeout_s or 30)))
    except oauth.OAuthFailed as exc:
        message = redact_outside(str(exc), org_id=actor.org_id)
        raise ValidationFailed(message, {"oauth": message}) from None
    except Exception as exc:
        message = ("Could not reach the server or its authorization server: "
                   f"{redact_outside(str(exc), org_id=actor.org_id)}")
        raise ValidationFailed(message, {"oauth": message}) from None


def complete_authorization(*, actor: Actor, pending: oauth.Pending, code: str, state: str,
                           iss: str | None = None) -> McpServer:
    """Exchanges the code, stores the tokens (encrypted) and syncs. Writes McpServer.oauth/oauth_secrets and a
    `server.authorized` audit row (no token in it). Raises PermissionDenied, NotFound, ValidationFailed."""
    actor.require("servers.manage")
    server = selectors.get_server(org_id=actor.org_id, server_id=pending.server_id)
    try:
        grant = run_async(oauth.complete(pending, code=code, state=state, iss=iss,
                                         timeout=float(server.timeout_s or 30)))
    except oauth.OAuthFailed as exc:
        raise ValidationFailed(str(exc), {"oauth": str(exc)}) from None
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server.pk)
        server.oauth, server.oauth_secrets = grant.state, grant.secrets
        server.status, server.last_error = ServerStatus.NEW, ""
        server.save(update_fields=["oauth", "oauth_secrets", "status", "last_error", "updated_at"])
        audit.record(org_id=server.org_id, actor=actor, action="server.authorized", target=server,
                     target_label=server.name, data={"scope": grant.state.get("scope") or "",
                                                     "resource": grant.state["resource"]})
        if server.enabled:
            _enqueue_sync(server)
    return server


def ensure_fresh_token(server: McpServer, *, force: bool = False) -> bool:
    """Refreshes the server's access token when it is due (oauth.refresh_due), or now with `force` (the
    server refused a token we held for good). False (and the server marked "needs authorization") when the
    refresh is refused; True when the token is good. The row stays locked during the refresh: with rotating
    refresh tokens, two processes refreshing at once would make the second one's refresh fail."""
    if not server.oauth or not (force or oauth.needs_refresh(server.oauth)):
        return True
    with transaction.atomic():
        row = McpServer.objects.select_for_update().get(pk=server.pk)
        refreshed_meanwhile = (row.oauth_secrets or {}).get("access_token") != (
            server.oauth_secrets or {}).get("access_token")
        if refreshed_meanwhile or not (force or oauth.needs_refresh(row.oauth)):  # another process did it
            server.oauth, server.oauth_secrets, server.updated_at = row.oauth, row.oauth_secrets, row.updated_at
            return True
        try:
            grant = run_async(oauth.refresh(row.oauth, dict(row.oauth_secrets or {}),
                                            timeout=float(row.timeout_s or 30)))
        except Exception as exc:
            why = str(exc) if isinstance(exc, oauth.OAuthFailed) else "the authorization server is unreachable"
            message = f"Refreshing the OAuth token failed ({why}): authorize Airlock again from the server's page."
            _mark_needs_authorization(server.pk, message)
            server.status, server.last_error = ServerStatus.NEEDS_AUTH, message
            return False
        row.oauth, row.oauth_secrets = grant.state, grant.secrets
        row.save(update_fields=["oauth", "oauth_secrets", "updated_at"])
    server.oauth, server.oauth_secrets, server.updated_at = row.oauth, row.oauth_secrets, row.updated_at
    return True


def _record_failure(*, actor: Actor, server_id: UUID, message: str) -> SyncReport:
    """`message` is what the server (or its stderr) said: redacted of the org's secrets before it is kept."""
    message = redact_outside(message, org_id=actor.org_id)
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server_id)
        server.status, server.last_error = ServerStatus.ERROR, message
        server.save(update_fields=["status", "last_error", "updated_at"])
        audit.record(org_id=server.org_id, actor=actor, action="server.sync_failed", target=server,
                     target_label=server.name, data={"error": message[:500]})
    publish_after_commit(org_group(server.org_id), "server.synced", server_id=str(server.id))
    return SyncReport(status=ServerStatus.ERROR, error=message)


def _apply_discovery(*, actor: Actor, server_id: UUID, discovery: Discovery, review: DefinitionReview) -> SyncReport:
    now = timezone.now()
    with transaction.atomic():
        server = McpServer.objects.select_for_update().get(pk=server_id)
        report = SyncReport(status=ServerStatus.OK, protocol_version=discovery.protocol_version)
        warnings = list(discovery.warnings)
        existing = {t.name: t for t in server.tools.all()}
        seen: set[str] = set()
        for fields in discovery.tools:
            if message := tool_name_error(server.name, fields["name"]):
                warnings.append(f"Refused: {message}")
                continue
            seen.add(fields["name"])
            _sync_tool(server, existing.get(fields["name"]), fields, now, report, actor, review)
        for name, tool in existing.items():
            if name not in seen and tool.state != ToolState.REMOVED:
                tool.state, tool.state_reason = ToolState.REMOVED, "The server no longer offers this tool."
                tool.save(update_fields=["state", "state_reason", "updated_at"])
                review.tool_saved(tool)
                report.tools_removed += 1
        report.resources_quarantined = resources.sync_resources(actor=actor, server=server, listed=discovery.resources,
                                                                now=now, warnings=warnings, review=review)
        _store_server_facts(server, discovery, warnings, now)
        audit.record(org_id=server.org_id, actor=actor, action="server.synced", target=server,
                     target_label=server.name,
                     data={"protocol_version": discovery.protocol_version, "added": report.tools_added,
                           "changed": report.tools_changed, "removed": report.tools_removed,
                           "quarantined": report.quarantined,
                           "resources_quarantined": report.resources_quarantined, "warnings": warnings[:20]})
    publish_after_commit(org_group(server.org_id), "server.synced", server_id=str(server.id))
    return report


def _store_server_facts(server: McpServer, discovery: Discovery, warnings: list[str], now) -> None:
    server.status, server.last_error, server.last_synced_at = ServerStatus.OK, "", now
    server.protocol_version = discovery.protocol_version
    server.server_info, server.capabilities = discovery.server_info, discovery.capabilities
    server.instructions = discovery.instructions
    server.resources, server.resource_templates = discovery.resources, discovery.resource_templates
    server.prompts, server.sync_warnings = discovery.prompts, warnings
    server.findings = scan_server(instructions=discovery.instructions, prompts=discovery.prompts,
                                  resources=discovery.resources, resource_templates=discovery.resource_templates)
    server.save(update_fields=["status", "last_error", "last_synced_at", "protocol_version", "server_info",
                               "capabilities", "instructions", "resources", "resource_templates", "prompts",
                               "sync_warnings", "findings", "updated_at"])


def _high_finding(findings: list[dict[str, str]]) -> dict[str, str] | None:
    return next((f for f in findings if f["severity"] == Severity.HIGH), None)


def _sync_tool(server: McpServer, tool: Tool | None, fields: dict[str, Any], now, report: SyncReport,
               actor: Actor, review: DefinitionReview) -> None:
    """Creates or refreshes one tool and decides its state (see ARCHITECTURE.md section 6)."""
    definition = canonical_definition(**{k: fields[k] for k in (
        "name", "title", "description", "input_schema", "output_schema", "annotations")})
    digest = definition_hash(definition)
    findings = scan_definition(definition)
    high = _high_finding(findings)
    is_new = tool is None
    if tool is None:
        tool = Tool(org_id=server.org_id, server=server, name=fields["name"])
        report.tools_added += 1
    elif tool.definition_hash != digest:
        report.tools_changed += 1
    previous_state = tool.state
    tool.qualified_name = qualified_name(server.name, fields["name"])
    for key in ("title", "description", "input_schema", "output_schema", "annotations", "icons"):
        setattr(tool, key, fields[key])
    tool.definition, tool.definition_hash, tool.findings, tool.last_seen_at = definition, digest, findings, now
    if tool.risk_source != RiskSource.ADMIN:
        risk, source = classify_risk(tier=server.trust_tier, annotations=fields["annotations"], name=fields["name"])
        # A change that lowers the risk is a claim like any other: it waits for an admin's pin (pin_tool).
        if is_new or digest == tool.pinned_hash or RISK_ORDER[risk] >= RISK_ORDER[tool.risk]:
            tool.risk, tool.risk_source = risk, source
    if is_new and server.trust_tier in TRUSTED_TIERS and high is None:
        tool.pinned_hash, tool.pinned_definition, tool.pinned_at = digest, definition, now
        tool.pinned_by = f"first sync ({server.get_trust_tier_display().lower()} server)"
    _decide_state(tool, high, previous_state)
    tool.save()
    review.tool_saved(tool)
    if tool.state == ToolState.QUARANTINED and (is_new or previous_state != ToolState.QUARANTINED):
        report.quarantined.append(tool.qualified_name)
        audit.record(org_id=server.org_id, actor=actor, action="tool.quarantined", target=tool,
                     target_label=tool.qualified_name,
                     data={"reason": tool.state_reason, "definition_hash": digest,
                           "pinned_hash": tool.pinned_hash, "findings": [f["code"] for f in findings]})


def _decide_state(tool: Tool, high: dict[str, str] | None, previous_state: str) -> None:
    """Active only when the current definition is the pinned one; drift and new high findings
    quarantine; an admin's `disabled` stays."""
    if previous_state == ToolState.DISABLED and tool.pk:
        return
    if tool.is_pinned:
        tool.state, tool.state_reason = ToolState.ACTIVE, ""
    elif tool.pinned_hash:
        tool.state, tool.state_reason = ToolState.QUARANTINED, DRIFTED
    elif high is not None:
        tool.state = ToolState.QUARANTINED
        tool.state_reason = f"Poisoning scan ({high['code']} in {high['where']}): {high['message']}"[:300]
    else:
        tool.state, tool.state_reason = ToolState.QUARANTINED, AWAITING_PIN


# --- tools --------------------------------------------------------------------------------------

def pin_tool(*, actor: Actor, tool_id: UUID | str, review: DefinitionReview) -> Tool:
    """Approves the tool's current definition: pins its hash and lifts a quarantine.

    Writes Tool (told to `review`) + `tool.pinned` audit (hashes and finding codes). Raises PermissionDenied,
    NotFound, Conflict (the tool was removed by its server).
    """
    actor.require("servers.manage")
    with transaction.atomic():
        tool = Tool.objects.select_for_update().get(pk=selectors.get_tool(org_id=actor.org_id, tool_id=tool_id).pk)
        if tool.state == ToolState.REMOVED:
            raise Conflict("The server no longer offers this tool; there is nothing to pin.")
        previous = tool.pinned_hash
        if tool.risk_source != RiskSource.ADMIN:  # the approved definition's own risk (a lower one waited for this)
            tool.risk, tool.risk_source = classify_risk(tier=tool.server.trust_tier, annotations=tool.annotations,
                                                        name=tool.name)
        tool.pinned_hash, tool.pinned_definition = tool.definition_hash, tool.definition
        tool.pinned_at, tool.pinned_by = timezone.now(), actor.label
        if tool.state == ToolState.QUARANTINED:
            tool.state, tool.state_reason = ToolState.ACTIVE, ""
        tool.save(update_fields=["pinned_hash", "pinned_definition", "pinned_at", "pinned_by", "state",
                                 "state_reason", "risk", "risk_source", "updated_at"])
        review.tool_saved(tool)
        audit.record(org_id=actor.org_id, actor=actor, action="tool.pinned", target=tool,
                     target_label=tool.qualified_name,
                     data={"definition_hash": tool.definition_hash, "previous_pinned_hash": previous,
                           "findings": [f"{f['severity']}:{f['code']}" for f in tool.findings]})
    publish_after_commit(org_group(actor.org_id), "tool.changed", tool_id=str(tool.id))
    return tool


def update_tool(*, actor: Actor, tool_id: UUID | str, review: DefinitionReview, risk: str | None = None,
                state: str | None = None) -> Tool:
    """An admin overrides a tool's risk class (risk_source becomes `admin`) and/or its state
    (`disabled`, `quarantined`, or `active` for a pinned tool).

    Writes Tool (told to `review`) + `tool.risk_changed` / `tool.state_changed` audit rows. Raises
    PermissionDenied, NotFound, ValidationFailed.
    """
    actor.require("servers.manage")
    if risk is not None and risk not in Risk.values:
        raise ValidationFailed("Risk must be read, write or dangerous.", {"risk": "Choose read, write or dangerous."})
    allowed_states = (ToolState.ACTIVE, ToolState.DISABLED, ToolState.QUARANTINED)
    if state is not None and state not in allowed_states:
        raise ValidationFailed("State must be active, disabled or quarantined.",
                               {"state": "Choose active, disabled or quarantined."})
    with transaction.atomic():
        tool = Tool.objects.select_for_update().get(pk=selectors.get_tool(org_id=actor.org_id, tool_id=tool_id).pk)
        if risk is not None and (risk != tool.risk or tool.risk_source != RiskSource.ADMIN):
            audit.record(org_id=actor.org_id, actor=actor, action="tool.risk_changed", target=tool,
                         target_label=tool.qualified_name, data={"from": tool.risk, "to": risk})
            tool.risk, tool.risk_source = risk, RiskSource.ADMIN
        if state is not None and state != tool.state:
            _change_state(actor, tool, state)
        tool.save(update_fields=["risk", "risk_source", "state", "state_reason", "updated_at"])
        review.tool_saved(tool)
    publish_after_commit(org_group(actor.org_id), "tool.changed", tool_id=str(tool.id))
    return tool


def _change_state(actor: Actor, tool: Tool, state: str) -> None:
    if tool.state == ToolState.REMOVED:
        raise ValidationFailed("The server no longer offers this tool.", {"state": "The tool was removed."})
    if state == ToolState.ACTIVE and not tool.is_pinned:
        raise ValidationFailed("Pin the current definition to make this tool active.",
                               {"state": "Pin the current definition first."})
    reasons = {ToolState.DISABLED: f"Disabled by {actor.label}.", ToolState.QUARANTINED:
               f"Quarantined by {actor.label}.", ToolState.ACTIVE: ""}
    audit.record(org_id=actor.org_id, actor=actor, action="tool.state_changed", target=tool,
                 target_label=tool.qualified_name, data={"from": tool.state, "to": state})
    tool.state, tool.state_reason = state, reasons[state]


def tool_diff(tool: Tool) -> str:
    """The drift diff shown on the tool page: pinned definition vs the current one."""
    if not tool.has_drift:
        return ""
    return definition_diff(tool.pinned_definition, tool.definition)


def request_sync(*, actor: Actor, server_id: UUID | str) -> McpServer:
    """Marks the server `syncing` and enqueues a sync on commit (the web button; no audit row:
    the sync itself writes one). Raises PermissionDenied, NotFound, Conflict (disabled)."""
    actor.require("servers.manage")
    with transaction.atomic():
        server = selectors.get_server(org_id=actor.org_id, server_id=server_id)
        if not server.enabled:
            raise Conflict(f"The server {server.name!r} is disabled; enable it before syncing.")
        server.status = ServerStatus.SYNCING
        server.save(update_fields=["status", "updated_at"])
        _enqueue_sync(server)
    return server
