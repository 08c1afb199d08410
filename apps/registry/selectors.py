"""Tenant-scoped reads of servers and tools. "Not yours" and "missing" both raise NotFound."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Count, F, Q, QuerySet

from apps.audit import selectors as audit_selectors
from apps.core.errors import NotFound
from apps.registry.models import McpServer, Resource, Risk, Tool, ToolState, Transport


def servers_for_org(*, org_id: UUID | str) -> QuerySet[McpServer]:
    """Servers with counts of their live tools per risk class (`n_read`, `n_write`, `n_dangerous`). The built-in
    `human` server (apps/registry/builtin.py) is left out: nothing about it can be registered or synced."""
    live = ~Q(tools__state=ToolState.REMOVED)
    return McpServer.objects.filter(org_id=org_id).exclude(transport=Transport.BUILTIN).annotate(
        n_tools=Count("tools", filter=live),
        n_quarantined=Count("tools", filter=Q(tools__state=ToolState.QUARANTINED)),
        **{f"n_{risk}": Count("tools", filter=live & Q(tools__risk=risk)) for risk in Risk.values},
    ).order_by("name")


def get_server(*, org_id: UUID | str, server_id: UUID | str) -> McpServer:
    try:
        return McpServer.objects.get(org_id=org_id, id=server_id)
    except (McpServer.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such MCP server.") from None


def get_server_by_name(*, org_id: UUID | str, name: str) -> McpServer | None:
    return McpServer.objects.filter(org_id=org_id, name=name).first()


def server_by_id(server_id: UUID | str) -> McpServer:
    """For workers holding only an id (tasks, the pool); the id came from a tenant-scoped write."""
    try:
        return McpServer.objects.get(id=server_id)
    except (McpServer.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such MCP server.") from None


def servers_due_for_sync(*, synced_before: datetime) -> QuerySet[McpServer]:
    """Enabled servers (any organisation) not synced since `synced_before`: beat's periodic sync."""
    return McpServer.objects.filter(enabled=True).exclude(transport=Transport.BUILTIN).filter(
        Q(last_synced_at__isnull=True) | Q(last_synced_at__lt=synced_before)
    ).exclude(status="syncing")


def tools_for_org(*, org_id: UUID | str, server: UUID | str | None = None, risk: str = "", state: str = "",
                  usable_only: bool = False) -> QuerySet[Tool]:
    """Tools of an organisation's MCP servers (not the built-in `human.ask`: an agent is granted it in its
    picker). `usable_only`: active and exactly as pinned (what agents may use)."""
    tools = Tool.objects.filter(org_id=org_id).exclude(server__transport=Transport.BUILTIN).select_related("server")
    if server:
        try:
            tools = tools.filter(server_id=UUID(str(server)))
        except ValueError:
            tools = tools.filter(server__name=server)
    if risk:
        tools = tools.filter(risk=risk)
    if state:
        tools = tools.filter(state=state)
    if usable_only:
        tools = tools.filter(state=ToolState.ACTIVE, server__enabled=True, pinned_hash=F("definition_hash"))
    return tools.order_by("qualified_name")


def get_tool(*, org_id: UUID | str, tool_id: UUID | str) -> Tool:
    try:
        return Tool.objects.select_related("server").get(org_id=org_id, id=tool_id)
    except (Tool.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such tool.") from None


def get_tool_by_qualified_name(*, org_id: UUID | str, qualified_name: str) -> Tool:
    tool = Tool.objects.select_related("server").filter(org_id=org_id, qualified_name=qualified_name).first()
    if tool is None:
        raise NotFound(f"No tool named {qualified_name!r}.")
    return tool


@dataclass(frozen=True)
class TrustedOutputSetting:
    """Who marked a server's or a tool's output trusted (or outside content), and when (from the audit log)."""

    by: str
    at: datetime


def trusted_output_setting(target: McpServer | Tool | Resource) -> TrustedOutputSetting | None:
    """For a server, tool or resource whose output is trusted, who set it and when; None when it is not trusted."""
    return _mark_setting(target, "trusted_output")


def outside_content_setting(target: McpServer | Tool) -> TrustedOutputSetting | None:
    """For a server or tool marked "outside content", who marked it and when; None when it is not marked."""
    return _mark_setting(target, "outside_content")


def _mark_setting(target: McpServer | Tool | Resource, field: str) -> TrustedOutputSetting | None:
    if not getattr(target, field, False):
        return None
    kind = {McpServer: "server", Tool: "tool", Resource: "resource"}[type(target)]
    action = f"{kind}.{field}_changed"
    event = audit_selectors.last_event(org_id=target.org_id, action=action, target_id=str(target.pk))
    return TrustedOutputSetting(by=event.actor_label, at=event.created_at) if event is not None else None


def _with_findings(server: McpServer, kind: str, items: list[dict], key) -> list[dict]:
    """Each item with the findings of the last sync's scan (apps/registry/scanner.py `scan_server`) that are
    about it: the scan labels each finding `"<kind> <name> <field>"`."""
    out = []
    for item in items or []:
        label = f"{kind} {key(item)} "
        about = [f for f in server.findings or [] if str(f.get("where", "")).startswith(label)]
        out.append({**item, "findings": about})
    return out


def server_resources(*, org_id: UUID | str, server_id: UUID | str) -> list[dict]:
    """The resources, then the resource templates, the server offered at its last sync (wire JSON), each with
    its description's scan findings; a resource also with its registry row (`resource`: id, state, pin), what an
    agent may be granted. Raises NotFound for another organisation's server."""
    server = get_server(org_id=org_id, server_id=server_id)
    name = lambda item: item.get("name") or item.get("uri") or item.get("uriTemplate") or "?"  # noqa: E731
    rows = {r.uri: r for r in Resource.objects.filter(org_id=org_id, server=server).select_related("server")}
    listed = [{**item, "resource": rows.get(item.get("uri") or "")}
              for item in _with_findings(server, "resource", server.resources, name)]
    return [*listed, *_with_findings(server, "resource template", server.resource_templates, name)]


def resources_for_org(*, org_id: UUID | str, server: UUID | str | None = None, state: str = "",
                      usable_only: bool = False) -> QuerySet[Resource]:
    """Resources of an organisation's servers. `usable_only`: active, exactly as pinned, on an enabled server
    (what an agent may be given as context)."""
    rows = Resource.objects.filter(org_id=org_id).select_related("server")
    if server:
        try:
            rows = rows.filter(server_id=UUID(str(server)))
        except ValueError:
            rows = rows.filter(server__name=server)
    if state:
        rows = rows.filter(state=state)
    if usable_only:
        rows = rows.filter(state=ToolState.ACTIVE, server__enabled=True, pinned_hash=F("definition_hash"))
    return rows.order_by("server__name", "uri")


def get_resource(*, org_id: UUID | str, resource_id: UUID | str) -> Resource:
    try:
        return Resource.objects.select_related("server").get(org_id=org_id, id=resource_id)
    except (Resource.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such resource.") from None


def server_prompts(*, org_id: UUID | str, server_id: UUID | str) -> list[dict]:
    """The prompts the server offered at its last sync (wire JSON), each with its scan findings."""
    server = get_server(org_id=org_id, server_id=server_id)
    return _with_findings(server, "prompt", server.prompts, lambda item: item.get("name") or "?")


def server_names(*, org_id: UUID | str) -> set[str]:
    """Every name taken in the organisation, the built-in `human` server's included."""
    return set(McpServer.objects.filter(org_id=org_id).values_list("name", flat=True))
