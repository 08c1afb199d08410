"""What one agent may see through the gateway: its grants as policy facts, the tools offered
(granted, active, pinned, not denied by the policy point) as MCP tool definitions, and the
resources and prompts of the servers it may use.

An `AgentView` is built from the database in one go (`load_view`, sync) and kept in memory by
the endpoint; `fingerprint` changes whenever anything the view shows or decides changes, which
is how the endpoint knows to send list-changed notices.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import mcp.types as types
from django.db.models import F
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from apps.agents.models import Agent, ToolGrant
from apps.agents.policy import CallFacts, decide
from apps.registry.connection import ServerSpec, spec_for
from apps.registry.definitions import TRUSTED, output_trust, reaches_open_world, untrusted_output
from apps.registry.models import McpServer, Resource, ToolState, TrustTier
from apps.registry.schemas import arguments_problem, input_validator

# Hints a trusted server may set; read-only and destructive always come from Airlock's risk class.
TRUSTED_HINTS = ("idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class GrantedTool:
    qualified_name: str
    tool_id: str
    server_id: str
    server_name: str
    name: str  # the downstream server's own name for it
    description: str
    input_schema: dict[str, Any]
    risk: str
    state: str
    pinned: bool
    trust_tier: str
    definition_hash: str
    open_world: bool
    output_trust: str  # what admins said of its results: "trusted", "outside" or "" (registry.definitions)
    grant: str
    condition: str
    wire: types.Tool | None  # the definition listed to clients; None when not offered
    validator: Any = field(compare=False, repr=False, default=None)

    def facts(self, *, arguments: dict[str, Any] | None, tainted: bool, taint_source: str = "") -> CallFacts:
        return CallFacts(tool=self.qualified_name, risk=self.risk, state=self.state, pinned=self.pinned,
                         trust_tier=self.trust_tier, grant=self.grant, condition=self.condition,
                         arguments=arguments, tainted=tainted, taint_source=taint_source,
                         open_world=self.open_world)

    @property
    def untrusted_output(self) -> bool:
        """Reading its result taints the session (every later write and open-world read needs a person)."""
        return untrusted_output(tier=self.trust_tier, open_world=self.open_world, trust=self.output_trust)

    def snapshot(self) -> dict[str, Any]:
        """The run snapshot's shape for a tool (what the approval and trace pages read)."""
        return {"id": self.tool_id, "server_id": self.server_id, "server": self.server_name, "name": self.name,
                "qualified_name": self.qualified_name, "description": self.description,
                "input_schema": self.input_schema, "risk": self.risk, "state": self.state, "pinned": self.pinned,
                "trust_tier": self.trust_tier, "definition_hash": self.definition_hash,
                "open_world": self.open_world, "output_trust": self.output_trust,
                "trusted_output": self.output_trust == TRUSTED}


@dataclass(frozen=True)
class ServerRelay:
    """What the gateway relays between a server and the host calling it: the server's settings for its own
    requests (the same as in runs: apps/registry/host.py) and what its last sync says it serves."""

    name: str
    allow_elicitation: bool = False
    allow_sampling: bool = False
    hold_sampling: bool = False
    logging: bool = False  # its log messages can be relayed
    completions: bool = False
    subscribe: bool = False  # it declares `resources.subscribe`

    @property
    def may_ask(self) -> bool:
        return self.allow_elicitation or self.allow_sampling

    @classmethod
    def of(cls, server: McpServer) -> ServerRelay:
        caps = server.capabilities or {}
        # A handshake-era server declares `logging`; in 2026-07-28 logging is asked for per request and the
        # capability is deprecated, so a server of that era may log without declaring it.
        logs = "logging" in caps or server.protocol_version in MODERN_PROTOCOL_VERSIONS
        return cls(name=server.name, allow_elicitation=server.allow_elicitation,
                   allow_sampling=server.allow_sampling, hold_sampling=server.hold_sampling,
                   logging=logs, completions="completions" in caps,
                   subscribe=bool((caps.get("resources") or {}).get("subscribe")))


@dataclass
class AgentView:
    agent_id: str
    agent_name: str
    enabled: bool
    grants: dict[str, GrantedTool]  # every grant, by qualified name
    specs: dict[str, ServerSpec]  # server id -> how to reach it (secrets decrypted: memory only)
    resources: dict[str, tuple[str, dict[str, Any]]]  # uri -> (server id, wire resource)
    resource_templates: list[tuple[str, dict[str, Any]]]  # (server id, wire template)
    prompts: dict[str, tuple[str, str, dict[str, Any]]]  # qualified name -> (server id, name, wire prompt)
    fingerprint: str
    servers: dict[str, ServerRelay] = field(default_factory=dict)  # server id -> what is relayed for it
    # Every name a host may call an offered tool by -> its qualified name: the qualified name, and the
    # server's own name for it when no other offered tool has that name. Prompts likewise.
    tool_names: dict[str, str] = field(default_factory=dict)
    prompt_names: dict[str, str] = field(default_factory=dict)

    @property
    def offered(self) -> list[GrantedTool]:
        return [g for g in self.grants.values() if g.wire is not None]

    @cached_property
    def granted_names(self) -> frozenset[str]:
        return frozenset(self.grants)

    def may_read(self, uri: str) -> str | None:
        """The id of the server whose resource (or resource template) `uri` is, when this agent may read it."""
        if uri in self.resources:
            return self.resources[uri][0]
        return next((sid for sid, prefix in self.template_prefixes() if uri.startswith(prefix)), None)

    def template_prefixes(self):
        """(server id, the fixed start of a template's URIs) for each resource template with one."""
        for server_id, template in self.resource_templates:
            prefix = template["uriTemplate"].split("{", 1)[0]
            if prefix:
                yield server_id, prefix

    def template_server(self, uri_template: str) -> str | None:
        return next((sid for sid, t in self.resource_templates if t["uriTemplate"] == uri_template), None)

    def schema_problem(self, tool: GrantedTool, arguments: dict[str, Any]) -> str:
        """The engine's check: the most relevant problem with the arguments, or ''."""
        return arguments_problem(tool.validator, arguments)


def _annotations(tool: Any, trust_tier: str) -> types.ToolAnnotations:
    claimed = (tool.annotations or {}) if trust_tier != TrustTier.THIRD_PARTY else {}
    hints = {k: claimed[k] for k in TRUSTED_HINTS if isinstance(claimed.get(k), bool)}
    return types.ToolAnnotations.model_validate({
        **hints, "title": tool.title or None, "readOnlyHint": tool.risk == "read",
        "destructiveHint": tool.risk == "dangerous"})


def load_view(agent_id: str) -> AgentView:
    """The agent's view, from the database (sync; run it off the event loop)."""
    agent = Agent.objects.filter(id=agent_id).only("id", "name", "enabled", "org_id").first()
    if agent is None:
        return AgentView(agent_id, "", False, {}, {}, {}, [], {}, fingerprint="gone")
    grants = ToolGrant.objects.filter(agent_id=agent.id).select_related("tool__server").order_by(
        "tool__qualified_name")
    view_grants: dict[str, GrantedTool] = {}
    servers: dict[str, McpServer] = {}
    usable_servers: set[str] = set()
    for grant in grants:
        tool, server = grant.tool, grant.tool.server
        if server.transport == "builtin":  # human.ask parks a run; a gateway client has no run to park
            continue
        state = tool.state if server.enabled else "disabled"
        granted = GrantedTool(
            qualified_name=tool.qualified_name, tool_id=str(tool.id), server_id=str(server.id),
            server_name=server.name, name=tool.name, description=tool.description,
            input_schema=tool.input_schema or {}, risk=tool.risk, state=state, pinned=tool.is_pinned,
            trust_tier=server.trust_tier, definition_hash=tool.definition_hash,
            open_world=reaches_open_world(tier=server.trust_tier, annotations=tool.annotations),
            output_trust=output_trust(tool, server), grant=grant.policy, condition=grant.condition,
            wire=None, validator=input_validator(tool.input_schema))
        offered = agent.enabled and decide(granted.facts(arguments=None, tainted=False)).offered
        if offered:
            wire = types.Tool(name=tool.qualified_name, title=tool.title or None,
                              description=tool.description or None,
                              input_schema=tool.input_schema or {"type": "object"},
                              output_schema=tool.output_schema or None,
                              annotations=_annotations(tool, server.trust_tier))
            granted = GrantedTool(**{**granted.__dict__, "wire": wire})
            usable_servers.add(str(server.id))
        servers[str(server.id)] = server
        view_grants[tool.qualified_name] = granted
    specs = {sid: spec_for(s) for sid, s in servers.items() if sid in usable_servers}
    resources: dict[str, tuple[str, dict[str, Any]]] = {}
    templates: list[tuple[str, dict[str, Any]]] = []
    prompts: dict[str, tuple[str, str, dict[str, Any]]] = {}
    # A resource is offered as an agent is given one: active and exactly its pinned definition (a new one
    # awaits its pin, a changed or poisoned one is quarantined).
    pinned = {(str(sid), uri) for sid, uri in Resource.objects.filter(
        server_id__in=usable_servers, state=ToolState.ACTIVE, pinned_hash=F("definition_hash")).values_list(
        "server_id", "uri")}
    for sid in sorted(usable_servers, key=lambda s: servers[s].name):
        server = servers[sid]
        for resource in server.resources or []:
            if (sid, resource.get("uri")) in pinned:
                resources.setdefault(resource["uri"], (sid, resource))
        templates += [(sid, t) for t in server.resource_templates or [] if t.get("uriTemplate")]
        for prompt in server.prompts or []:
            if prompt.get("name"):
                prompts.setdefault(f"{server.name}.{prompt['name']}", (sid, prompt["name"], prompt))
    relays = {sid: ServerRelay.of(servers[sid]) for sid in usable_servers}
    body = json.dumps([
        agent.enabled,
        [(g.qualified_name, g.risk, g.state, g.pinned, g.trust_tier, g.definition_hash, g.grant, g.condition,
          g.wire.model_dump(mode="json") if g.wire else None) for g in view_grants.values()],
        {sid: spec.fingerprint for sid, spec in specs.items()},
        sorted(resources), [t for _, t in templates], sorted(prompts), {sid: r.__dict__ for sid, r in relays.items()},
    ], sort_keys=True, default=str)
    return AgentView(str(agent.id), agent.name, agent.enabled, view_grants, specs, resources, templates, prompts,
                     fingerprint=hashlib.sha256(body.encode()).hexdigest(), servers=relays,
                     tool_names=_names({g.qualified_name: g.name for g in view_grants.values() if g.wire}),
                     prompt_names=_names({q: name for q, (_, name, _) in prompts.items()}))


def _names(own_names: dict[str, str]) -> dict[str, str]:
    """Qualified name -> itself, plus a server's own name -> the qualified name where only one has it."""
    counts = Counter(own_names.values())
    aliases = {own: qualified for qualified, own in own_names.items() if counts[own] == 1 and own not in own_names}
    return {**aliases, **{q: q for q in own_names}}
