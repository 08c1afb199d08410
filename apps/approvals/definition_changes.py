"""Definition-change items: the inbox's side of pinning tools and resources.

A tool or resource whose definition drifted from its pin is quarantined by the registry; an admin reviews
the diff in the inbox and pins it (or keeps it quarantined). The registry sits below approvals and knows
nothing of the inbox: each registry service that saves a tool or resource row takes a `DefinitionReview`
(apps.registry.review) and tells it of the row in its own transaction. `inbox`, here, is that review for
every caller: it opens an item for a quarantined, drifted row and settles the open ones once the row is
pinned as it is now.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, ApprovalVote, VoteDecision
from apps.approvals.services import (
    already_decided,
    notification_payload,
    open_request,
    publish_inbox_count,
    publish_item,
)
from apps.audit import services as audit
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.notifications.services import notify
from apps.registry import resources as registry_resources
from apps.registry import selectors as registry_selectors
from apps.registry import services as registry
from apps.registry.definitions import definition_diff
from apps.registry.models import Resource, Tool, ToolState


class InboxReview:
    """The registry's `DefinitionReview` (apps.registry.review): a saved row's pin and state decide its items."""

    def tool_saved(self, tool: Tool) -> None:
        if tool.state == ToolState.QUARANTINED and tool.has_drift:
            open_definition_change(tool=tool)
        elif tool.is_pinned:
            close_definition_changes(tool=tool)

    def resource_saved(self, resource: Resource) -> None:
        if resource.state == ToolState.QUARANTINED and resource.has_drift:
            open_resource_change(resource=resource)
        elif resource.is_pinned:
            close_resource_changes(resource=resource)


inbox = InboxReview()


def open_definition_change(*, tool: Tool) -> ApprovalRequest | None:
    """An inbox item for admins when the registry quarantines a tool whose definition drifted from
    its pin (one pending item per tool and definition hash). Joins the registry's transaction."""
    if ApprovalRequest.objects.filter(org_id=tool.org_id, kind=ApprovalKind.DEFINITION_CHANGE, tool_id=tool.id,
                                      status=ApprovalStatus.PENDING, definition_hash=tool.definition_hash).exists():
        return None
    ApprovalRequest.objects.filter(org_id=tool.org_id, kind=ApprovalKind.DEFINITION_CHANGE, tool_id=tool.id,
                                   status=ApprovalStatus.PENDING).update(
        status=ApprovalStatus.EXPIRED, decided_at=timezone.now(), decided_by_label="a newer definition")
    request = open_request(
        org_id=tool.org_id, run_id=None, tool_call_id=None, agent_id=None, tool_id=tool.id,
        kind=ApprovalKind.DEFINITION_CHANGE,
        title=f"{tool.qualified_name} changed its definition", arguments={}, args_hash="",
        definition_hash=tool.definition_hash, risk=tool.risk, reason=tool.state_reason or "The definition changed.",
        rule="definition_changed",
        context={"diff": definition_diff(tool.pinned_definition, tool.definition), "description": tool.description,
                 "pinned_hash": tool.pinned_hash, "findings": tool.findings},
        expires_at=None, requested_by_user_id=None)
    return request


def close_definition_changes(*, tool: Tool) -> None:
    """The tool was pinned elsewhere (its page, the API): its pending item is settled."""
    _settle(ApprovalRequest.objects.filter(org_id=tool.org_id, kind=ApprovalKind.DEFINITION_CHANGE, tool_id=tool.id,
                                           status=ApprovalStatus.PENDING), pinned=tool)


def _settle(pending: Any, *, pinned: Tool | Resource) -> None:
    for request in pending:
        approved = request.definition_hash == pinned.definition_hash
        request.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.EXPIRED
        request.decided_at, request.decided_by_label = timezone.now(), (pinned.pinned_by or "pinned")[:200]
        request.save(update_fields=["status", "decided_at", "decided_by_label", "updated_at"])
        publish_inbox_count(org_id=request.org_id)
        publish_item(request)


def _resource_items(resource: Resource) -> Any:
    """A resource's pending definition-change items (the request names the resource in its context: its `tool`
    foreign key is for tools)."""
    return ApprovalRequest.objects.filter(org_id=resource.org_id, kind=ApprovalKind.DEFINITION_CHANGE,
                                          tool__isnull=True, context__resource_id=str(resource.id),
                                          status=ApprovalStatus.PENDING)


def open_resource_change(*, resource: Resource) -> ApprovalRequest | None:
    """As `open_definition_change`, for a resource quarantined because its definition drifted from its pin."""
    pending = _resource_items(resource)
    if pending.filter(definition_hash=resource.definition_hash).exists():
        return None
    pending.update(status=ApprovalStatus.EXPIRED, decided_at=timezone.now(), decided_by_label="a newer definition")
    return open_request(
        org_id=resource.org_id, run_id=None, tool_call_id=None, agent_id=None, tool_id=None,
        kind=ApprovalKind.DEFINITION_CHANGE, title=f"{resource.label} changed its definition", arguments={},
        args_hash="", definition_hash=resource.definition_hash, risk="",
        reason=resource.state_reason or "The definition changed.", rule="definition_changed",
        context={"resource_id": str(resource.id), "resource": resource.label,
                 "diff": definition_diff(resource.pinned_definition, resource.definition),
                 "description": resource.description, "pinned_hash": resource.pinned_hash,
                 "findings": resource.findings},
        expires_at=None, requested_by_user_id=None)


def close_resource_changes(*, resource: Resource) -> None:
    """The resource was pinned elsewhere (its page, the API): its pending item is settled."""
    _settle(_resource_items(resource), pinned=resource)


def _pin_what_changed(actor: Actor, request: ApprovalRequest) -> None:
    """Approving a definition-change item pins the tool, or the resource, it is about, as it was shown."""
    resource_id = (request.context or {}).get("resource_id") if request.tool_id is None else None
    if resource_id:
        try:
            resource = registry_selectors.get_resource(org_id=request.org_id, resource_id=resource_id)
        except NotFound:
            resource = None
        if resource is None or resource.definition_hash != request.definition_hash:
            raise Conflict("The resource's definition changed again since this item was opened; review the new one.")
        registry_resources.pin_resource(actor=actor, resource_id=resource_id, review=inbox)
        return
    if request.tool is None or request.tool.definition_hash != request.definition_hash:
        raise Conflict("The tool's definition changed again since this item was opened; review the new one.")
    registry.pin_tool(actor=actor, tool_id=request.tool_id, review=inbox)


def decide_definition_change(*, actor: Actor, approval_id: UUID | str, decision: str,
                             comment: str = "") -> ApprovalRequest:
    """Approve pins the tool's (or resource's) current definition, lifting the quarantine; reject keeps it
    quarantined.
    Admins and owners only. Raises Conflict (decided, or the definition changed again), NotFound."""
    actor.require("servers.manage")
    if decision not in (VoteDecision.APPROVE, VoteDecision.REJECT):
        raise ValidationFailed("Choose approve or reject.", {"decision": "Choose approve or reject."})
    with transaction.atomic():
        request = ApprovalRequest.objects.select_for_update().filter(
            org_id=actor.org_id, id=approval_id, kind=ApprovalKind.DEFINITION_CHANGE).first()
        if request is None:
            raise NotFound("No such approval request.")
        if request.status != ApprovalStatus.PENDING:
            raise Conflict(already_decided(request))
        if decision == VoteDecision.APPROVE:
            _pin_what_changed(actor, request)
            request.refresh_from_db()
        ApprovalVote.objects.create(org_id=request.org_id, request=request, user_id=actor.user_id,
                                    actor_label=actor.label, decision=decision, comment=comment)
        request.status = ApprovalStatus.APPROVED if decision == VoteDecision.APPROVE else ApprovalStatus.REJECTED
        request.decided_at, request.decided_by_id, request.decided_by_label = timezone.now(), actor.user_id, actor.label
        request.comment = comment
        request.save(update_fields=["status", "decided_at", "decided_by", "decided_by_label", "comment",
                                    "updated_at"])
        audit.record(org_id=request.org_id, actor=actor, action=f"definition_change.{decision}", target=request,
                     target_label=request.title, data={"definition_hash": request.definition_hash,
                                                       "comment": comment})
        publish_inbox_count(org_id=request.org_id)
        publish_item(request)
        notify(org_id=request.org_id, event="approval.decided", payload=notification_payload(request))
    return request
