"""Resources the organisation's servers list, pinned and quarantined like tools: what an agent may be given as
read-only context (`context_resources` on an agent)."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Query, Router, Schema
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.api.routers.servers import TrustedOutputIn
from apps.api.trusted_output import TrustedOutputFields
from apps.approvals.definition_changes import inbox
from apps.registry import resources, selectors
from apps.registry.models import ToolState

router = Router(tags=["resources"])


class ResourceFindingOut(Schema):
    code: str
    severity: str
    where: str
    message: str


class RegistryResourceOut(TrustedOutputFields):
    id: UUID
    server_id: UUID
    server: str
    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    size: int | None  # as the server listed it (a claim about the content, not pinned)
    annotations: dict[str, Any] | None
    state: str  # active, quarantined (new and waiting for a pin, or changed since its pin), disabled, removed
    state_reason: str
    usable: bool  # may be given to an agent now: active, exactly as pinned, its server enabled
    definition_hash: str
    pinned_hash: str
    pinned_at: datetime | None
    pinned_by: str
    findings: list[ResourceFindingOut]
    diff: str  # pinned definition -> current one, when it changed
    trusted_output: bool  # an admin vouches for its content: reading it does not taint a run
    last_content_hash: str  # SHA-256 of the content a run last read ('' when none has)
    last_read_at: datetime | None

    @staticmethod
    def resolve_server(obj) -> str:
        return obj.server.name

    @staticmethod
    def resolve_usable(obj) -> bool:
        return obj.is_usable

    @staticmethod
    def resolve_diff(obj) -> str:
        return resources.resource_diff(obj)


class ResourceFilters(Schema):
    server: str = ""
    state: ToolState | None = None
    usable: bool = False


class ResourcePatch(Body):
    state: Literal["active", "disabled", "quarantined"]


@router.get("", response=list[RegistryResourceOut])
@paginate(Pagination)
def list_resources(request, filters: Query[ResourceFilters]):
    request.auth.require("org.view")
    return selectors.resources_for_org(org_id=request.auth.org_id, server=filters.server or None,
                                       state=filters.state or "", usable_only=filters.usable)


@router.get("/{resource_id}", response=RegistryResourceOut)
def get_resource(request, resource_id: UUID):
    request.auth.require("org.view")
    return selectors.get_resource(org_id=request.auth.org_id, resource_id=resource_id)


@router.patch("/{resource_id}", response=RegistryResourceOut, summary="Disable, quarantine or re-activate it")
def update_resource(request, resource_id: UUID, payload: ResourcePatch):
    resources.set_resource_state(actor=request.auth, resource_id=resource_id, state=payload.state, review=inbox)
    return selectors.get_resource(org_id=request.auth.org_id, resource_id=resource_id)


@router.post("/{resource_id}/pin", response=RegistryResourceOut,
             summary="Approve the current definition; lifts a quarantine")
def pin_resource(request, resource_id: UUID):
    resources.pin_resource(actor=request.auth, resource_id=resource_id, review=inbox)
    return selectors.get_resource(org_id=request.auth.org_id, resource_id=resource_id)


@router.post("/{resource_id}/trusted-output", response=RegistryResourceOut,
             summary="Mark (or unmark) this resource's content as trusted")
def set_trusted_output(request, resource_id: UUID, payload: TrustedOutputIn):
    resources.set_resource_trusted_output(actor=request.auth, resource_id=resource_id, trusted=payload.trusted,
                                          review=inbox)
    return selectors.get_resource(org_id=request.auth.org_id, resource_id=resource_id)
