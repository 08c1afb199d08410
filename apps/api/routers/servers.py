from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.api.trusted_output import OutputTrustIn, TrustedOutputFields
from apps.approvals.definition_changes import inbox
from apps.registry import imports, selectors, services
from apps.registry.models import Transport, TrustTier

router = Router(tags=["servers"])


class ServerOut(TrustedOutputFields):
    id: UUID
    name: str
    description: str
    transport: Transport
    command: str
    args: list[str]
    cwd: str
    url: str
    env_keys: list[str]  # values are write-only
    header_keys: list[str]
    trust_tier: TrustTier
    enabled: bool
    timeout_s: int
    status: str  # new, syncing, ok, error, needs_auth (OAuth: authorize again from the server's page), disabled
    uses_oauth: bool  # Airlock holds OAuth tokens for it (never shown)
    protocol_version: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: str
    last_synced_at: datetime | None
    last_error: str
    sync_warnings: list[str]
    findings: list[dict[str, str]]  # the poisoning scan of its instructions, prompts and resource descriptions
    trusted_output: bool  # an admin vouches for its tools' results (they do not taint a run)
    outside_content: bool  # an admin says its tools return outside text: reading a result taints a run
    allow_elicitation: bool  # may ask people for input mid-call (a form in the inbox)
    allow_sampling: bool  # may run the calling agent's model, counted to its run
    hold_sampling: bool  # sampling waits for a person's approval first
    created_at: datetime




class TrustedOutputIn(Body):
    trusted: bool = Field(description="True: its results do not taint a run by where they come from (a scanner "
                                      "finding still does). Admins only; audited.")


class ServerIn(Body):
    name: str
    transport: Transport
    trust_tier: TrustTier
    description: str = ""
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: str = ""
    enabled: bool = True
    timeout_s: int = Field(30, ge=1, le=300)
    outside_content: bool = Field(False, description="Its tools return text written outside the organisation "
                                  "(emails, tickets, web pages): reading a result taints a run. See /output-trust.")


class ServerPatch(Body):
    name: str | None = None
    description: str | None = None
    transport: Transport | None = None
    trust_tier: TrustTier | None = None
    command: str | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    bearer_token: str = ""
    enabled: bool | None = None
    timeout_s: int | None = Field(None, ge=1, le=300)


class RequestsIn(Body):
    allow_elicitation: bool | None = None
    allow_sampling: bool | None = None
    hold_sampling: bool | None = None


class SyncOut(Schema):
    status: str
    tools_added: int
    tools_changed: int
    tools_removed: int
    protocol_version: str
    error: str
    quarantined: list[str]
    resources_quarantined: list[str]  # "server uri" of each resource quarantined by this sync


class ImportIn(Body):
    config: str = Field(description="The file's text: Claude Desktop `mcpServers`, `.mcp.json`, VS Code `mcp.json` "
                                    "or an MCP Registry `server.json`.")
    dry_run: bool = Field(True, description="True: only preview. False: register the chosen entries.")
    select: list[str] | None = Field(None, description="Preview names to register; all when omitted.")
    rename: dict[str, str] = Field(default_factory=dict, description="Preview name -> the name to register.")
    trust_tier: dict[str, TrustTier] = Field(default_factory=dict, description="Preview name -> tier to use.")
    env: dict[str, dict[str, str]] = Field(default_factory=dict,
                                           description="Preview name -> env values to fill in (write-only).")


class ImportEntryOut(Schema):
    source_name: str
    name: str
    transport: Transport
    trust_tier: TrustTier
    tier_reason: str
    command: str
    args: list[str]
    cwd: str
    url: str
    env: dict[str, str]  # keys, values masked
    headers: dict[str, str]  # keys, values masked
    description: str
    conflict: bool
    suggested_name: str
    notes: list[str]
    problem: str


class ImportResultOut(Schema):
    entry: str  # its name in the preview
    name: str  # the name it was registered under
    ok: bool
    server_id: str
    error: str
    errors: dict[str, str]


class ImportOut(Schema):
    format: str
    entries: list[ImportEntryOut]
    results: list[ImportResultOut]  # empty on a dry run


class ResourceOut(Schema):
    uri: str = ""
    uri_template: str = Field("", alias="uriTemplate")
    name: str = ""
    title: str = ""
    description: str = ""
    mime_type: str = Field("", alias="mimeType")
    findings: list[dict[str, str]]
    # A listed resource's registry row (a template has none): what an agent may be given as context
    # (GET /resources/{id} for its pin and diff).
    id: UUID | None = None
    state: str = ""
    state_reason: str = ""
    usable: bool = False

    @staticmethod
    def resolve_id(obj) -> UUID | None:
        return obj["resource"].id if obj.get("resource") else None

    @staticmethod
    def resolve_state(obj) -> str:
        return obj["resource"].state if obj.get("resource") else ""

    @staticmethod
    def resolve_state_reason(obj) -> str:
        return obj["resource"].state_reason if obj.get("resource") else ""

    @staticmethod
    def resolve_usable(obj) -> bool:
        return bool(obj.get("resource") and obj["resource"].is_usable)


class PromptArgumentOut(Schema):
    name: str
    description: str = ""
    required: bool = False


class PromptOut(Schema):
    name: str
    title: str = ""
    description: str = ""
    arguments: list[PromptArgumentOut] = Field(default_factory=list)
    findings: list[dict[str, str]]


@router.post("/import", response=ImportOut,
             summary="Preview (dry_run) or register the servers of an MCP config people already have")
def import_servers(request, payload: ImportIn):
    request.auth.require("servers.manage")
    kind, entries = imports.preview(org_id=request.auth.org_id, text=payload.config)
    results = [] if payload.dry_run else imports.import_servers(
        actor=request.auth, text=payload.config, select=payload.select, rename=payload.rename,
        tiers={k: str(v) for k, v in payload.trust_tier.items()}, env=payload.env)
    return {"format": kind, "entries": [e.view() for e in entries], "results": results}


@router.get("", response=list[ServerOut])
@paginate(Pagination)
def list_servers(request):
    request.auth.require("org.view")
    return selectors.servers_for_org(org_id=request.auth.org_id)


@router.post("", response={201: ServerOut})
def create_server(request, payload: ServerIn):
    return Status(201, services.create_server(actor=request.auth, **payload.dict()))


@router.get("/{server_id}", response=ServerOut)
def get_server(request, server_id: UUID):
    request.auth.require("org.view")
    return selectors.get_server(org_id=request.auth.org_id, server_id=server_id)


@router.patch("/{server_id}", response=ServerOut)
def update_server(request, server_id: UUID, payload: ServerPatch):
    return services.update_server(actor=request.auth, server_id=server_id, **payload.dict(), review=inbox)


@router.delete("/{server_id}", response={204: None})
def delete_server(request, server_id: UUID):
    services.delete_server(actor=request.auth, server_id=server_id)
    return Status(204, None)


@router.put("/{server_id}/requests", response=ServerOut,
            summary="What the server may ask during a call: elicitation, sampling, holding sampling for a person")
def set_requests(request, server_id: UUID, payload: RequestsIn):
    return services.set_server_requests(actor=request.auth, server_id=server_id, **payload.dict())


@router.post("/{server_id}/sync", response=SyncOut, summary="Connect now and refresh tools, resources and prompts")
def sync_server(request, server_id: UUID):
    return services.sync_server(actor=request.auth, server_id=server_id, review=inbox)


@router.post("/{server_id}/trusted-output", response=ServerOut,
             summary="Mark (or unmark) the output of every tool of this server as trusted")
def set_trusted_output(request, server_id: UUID, payload: TrustedOutputIn):
    services.set_trusted_output(actor=request.auth, server_id=server_id, trusted=payload.trusted, review=inbox)
    return selectors.get_server(org_id=request.auth.org_id, server_id=server_id)


@router.post("/{server_id}/output-trust", response=ServerOut,
             summary="Say what its tools' results are: trusted, outside content, or as the tier and hints say")
def set_output_trust(request, server_id: UUID, payload: OutputTrustIn):
    services.set_output_trust(actor=request.auth, server_id=server_id, trust=payload.trust, review=inbox)
    return selectors.get_server(org_id=request.auth.org_id, server_id=server_id)


@router.get("/{server_id}/resources", response=list[ResourceOut],
            summary="The resources and resource templates it offered at its last sync, with scan findings")
def list_resources(request, server_id: UUID):
    request.auth.require("org.view")
    return selectors.server_resources(org_id=request.auth.org_id, server_id=server_id)


@router.get("/{server_id}/prompts", response=list[PromptOut],
            summary="The prompts it offered at its last sync, with scan findings")
def list_prompts(request, server_id: UUID):
    request.auth.require("org.view")
    return selectors.server_prompts(org_id=request.auth.org_id, server_id=server_id)
