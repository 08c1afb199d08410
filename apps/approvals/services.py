"""Writes for the approval inbox: open a request, record a person's vote.

Runs own "decide and resume" (`apps.runs.decisions.decide_approval`): it calls `record_vote`
inside its own transaction, then queues the run. Only people vote: an actor without
`approvals.decide` is refused, and nothing a model or tool produces reaches these functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.approvals import selectors, standing
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, ApprovalVote, VoteDecision
from apps.audit import services as audit
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from apps.core.realtime import org_group, publish_after_commit
from apps.notifications.services import notify
from apps.registry import resources as registry_resources
from apps.registry import selectors as registry_selectors
from apps.registry import services as registry
from apps.registry.definitions import definition_diff


def open_request(*, org_id: UUID | str, run_id: UUID | str | None, tool_call_id: UUID | str | None,
                 agent_id: UUID | str | None, tool_id: UUID | str | None, title: str, arguments: dict[str, Any],
                 args_hash: str, definition_hash: str, risk: str, reason: str, rule: str,
                 context: dict[str, Any], expires_at: datetime | None, requested_by_user_id: int | None,
                 required_approvals: int = 1, kind: str = ApprovalKind.TOOL_CALL,
                 separation_of_duties: bool = False) -> ApprovalRequest:
    """A pending request in the inbox. Publishes the new inbox count after commit."""
    request = ApprovalRequest.objects.create(
        org_id=org_id, kind=kind, run_id=run_id, tool_call_id=tool_call_id, agent_id=agent_id, tool_id=tool_id,
        title=title[:300], arguments=arguments, args_hash=args_hash, definition_hash=definition_hash, risk=risk,
        reason=reason[:500], rule=rule[:40], context=context, expires_at=expires_at,
        requested_by_user_id=requested_by_user_id, required_approvals=max(1, required_approvals),
        separation_of_duties=separation_of_duties)
    publish_inbox_count(org_id=org_id)
    publish_item(request)
    notify(org_id=org_id, event="approval.requested", payload=notification_payload(request))
    return request


def publish_item(request: ApprovalRequest) -> None:
    """Every open inbox adds, refreshes or removes this item (with who decided) after commit."""
    publish_after_commit(org_group(request.org_id), "inbox.changed", approval_id=str(request.id),
                         status=request.status, by=request.decided_by_label)


def notification_payload(request: ApprovalRequest) -> dict[str, Any]:
    return {"approval_id": str(request.id), "kind": request.kind, "status": request.status, "title": request.title,
            "run_id": str(request.run_id) if request.run_id else None, "risk": request.risk, "reason": request.reason,
            "tool": request.tool.qualified_name if request.tool_id and request.tool else None,
            "decided_by": request.decided_by_label, "comment": request.comment,
            "expires_at": request.expires_at.isoformat() if request.expires_at else None,
            **({"ask": request.context.get("ask") or "approvers"} if request.kind == ApprovalKind.QUESTION else {})}


def publish_inbox_count(*, org_id: UUID | str) -> None:
    """After commit, every open page of the organisation re-reads its inbox badge (`apps.web.badges`, which
    also counts what later apps put in the inbox: runs' calls with an unknown outcome)."""
    publish_after_commit(org_group(org_id), "inbox.count")


def already_decided(request: ApprovalRequest) -> str:
    """ "This request was already approved by ana@example.com at 2026-05-01 14:03 UTC." """
    who = f" by {request.decided_by_label}" if request.decided_by_label else ""
    when = (f" at {timezone.localtime(request.decided_at).strftime('%Y-%m-%d %H:%M %Z')}"
            if request.decided_at else "")
    return f"This request was already {request.status}{who}{when}."


def record_vote(*, actor: Actor, request: ApprovalRequest, decision: str, comment: str = "",
                arguments: dict[str, Any] | None = None, approved_args_hash: str = "",
                standing_choice: dict[str, Any] | None = None) -> ApprovalRequest:
    """Adds one person's vote; decides the request when enough approvals are in or anyone rejects.

    Must run inside the caller's transaction with `request` locked (select_for_update); the caller then writes
    the vote's audit row with `audit_vote`, last before its commit.
    `standing_choice` ({"scope": "call"/"run"/"agent_tool", "condition", "hours"}) also creates a
    standing approval when the request ends approved (never for dangerous tools).
    Raises PermissionDenied (role, separation of duties), Conflict (already decided, voted twice),
    ValidationFailed (bad decision, bad standing choice).
    """
    actor.require("approvals.decide")
    if actor.user_id is None:
        # Votes count people: an actor that is no one (the system, an operator script) cannot be one.
        raise PermissionDenied("Only a member can vote on an approval request.")
    if decision not in VoteDecision.values:
        raise ValidationFailed("Choose approve, reject or answer.", {"decision": "Choose approve, reject or answer."})
    if request.status != ApprovalStatus.PENDING:
        raise Conflict(already_decided(request))
    if decision == VoteDecision.RESPOND and (request.kind != ApprovalKind.TOOL_CALL or not comment.strip()):
        raise ValidationFailed("Write the answer the agent should get instead of the call.",
                               {"comment": "Write the answer the agent should get instead of the call."})
    if decision == VoteDecision.APPROVE:
        refusal = selectors.starter_refusal(request, user_id=actor.user_id)
        if refusal:
            raise PermissionDenied(refusal)
    chosen = standing.clean_standing(request, standing_choice) if decision == VoteDecision.APPROVE else None
    # The votes so far, read once under the request's lock (no other vote on it can commit meanwhile):
    # whether this person already voted (by any token or session: a vote is the member's), and the
    # counts after this vote. A pending request that needs one approval has none (its first vote
    # decides it), so the usual decision skips the read.
    cast = (list(request.votes.values_list("user_id", "decision"))
            if request.required_approvals > 1 else [])
    if any(user_id == actor.user_id for user_id, _ in cast):
        raise Conflict("You already voted on this request.")
    try:
        # No savepoint: an IntegrityError here (approval_vote_once) ends the caller's transaction, which
        # rolls back as the Conflict leaves it; nothing catches it to carry on.
        ApprovalVote.objects.create(org_id=request.org_id, request=request, user_id=actor.user_id,
                                    actor_label=actor.label, decision=decision, comment=comment,
                                    arguments=arguments)
    except IntegrityError:
        raise Conflict("You already voted on this request.") from None
    approvals = sum(1 for _, d in cast if d == VoteDecision.APPROVE) + (decision == VoteDecision.APPROVE)
    request.votes_cast, request.approvals_given = len(cast) + 1, approvals
    fields = ["comment", "updated_at"]
    request.comment = "\n".join(c for c in (request.comment, comment) if c)
    if arguments is not None:
        request.approved_arguments, request.approved_args_hash = arguments, approved_args_hash
        fields += ["approved_arguments", "approved_args_hash"]
    # Any rejection or answer decides at once (an answer means the call does not run, like a rejection).
    if decision != VoteDecision.APPROVE or approvals >= request.required_approvals:
        request.status = {VoteDecision.APPROVE: ApprovalStatus.APPROVED, VoteDecision.REJECT: ApprovalStatus.REJECTED,
                          VoteDecision.RESPOND: ApprovalStatus.ANSWERED}[decision]
        if request.status == ApprovalStatus.APPROVED and request.approved_arguments is None:
            request.approved_arguments, request.approved_args_hash = request.arguments, request.args_hash
            fields += ["approved_arguments", "approved_args_hash"]
        request.decided_at, request.decided_by_id, request.decided_by_label = timezone.now(), actor.user_id, actor.label
        fields += ["status", "decided_at", "decided_by", "decided_by_label"]
    request.save(update_fields=sorted(set(fields)))
    if chosen and request.status == ApprovalStatus.APPROVED:
        standing.create_standing(actor=actor, request=request, **chosen)
    publish_inbox_count(org_id=request.org_id)
    publish_item(request)
    if request.status != ApprovalStatus.PENDING:
        notify(org_id=request.org_id, event="approval.decided", payload=notification_payload(request))
    return request


def audit_vote(*, actor: Actor, request: ApprovalRequest, decision: str, comment: str, edited: bool) -> None:
    """The audit row of the vote `record_vote` just wrote, as the last statement of the caller's transaction.

    Last, because it locks the organisation's audit chain head until the commit, and every audited write of the
    organisation (other decisions, run starts, tool calls in the workers) waits for that lock meanwhile; the
    chain's next hash is computed in the same statement (`send_record`), so the lock costs no round trip more.
    """
    audit.send_record(org_id=request.org_id, actor=actor, action=f"approval.{decision}", target=request,
                      target_label=request.title, data={"status": request.status, "comment": comment,
                                                        "edited": edited, "votes": request.votes_cast,
                                                        "required": request.required_approvals})


def expire_request(*, request: ApprovalRequest) -> ApprovalRequest:
    """Marks a pending request expired (its default outcome: reject). Caller holds the row lock."""
    if request.status != ApprovalStatus.PENDING:
        raise Conflict(f"This request was already {request.status}.")
    request.status, request.decided_at, request.decided_by_label = ApprovalStatus.EXPIRED, timezone.now(), "expiry"
    request.save(update_fields=["status", "decided_at", "decided_by_label", "updated_at"])
    audit.record(org_id=request.org_id, actor=None, action="approval.expired", target=request,
                 target_label=request.title)
    publish_inbox_count(org_id=request.org_id)
    publish_item(request)
    notify(org_id=request.org_id, event="approval.decided", payload=notification_payload(request))
    return request


# --- tool definition changes ---------------------------------------------------------------------

def open_definition_change(*, tool: Any) -> ApprovalRequest | None:
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


def close_definition_changes(*, tool: Any) -> None:
    """The tool was pinned elsewhere (its page, the API): its pending item is settled."""
    _settle(ApprovalRequest.objects.filter(org_id=tool.org_id, kind=ApprovalKind.DEFINITION_CHANGE, tool_id=tool.id,
                                           status=ApprovalStatus.PENDING), pinned=tool)


def _settle(pending: Any, *, pinned: Any) -> None:
    for request in pending:
        approved = request.definition_hash == pinned.definition_hash
        request.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.EXPIRED
        request.decided_at, request.decided_by_label = timezone.now(), (pinned.pinned_by or "pinned")[:200]
        request.save(update_fields=["status", "decided_at", "decided_by_label", "updated_at"])
        publish_inbox_count(org_id=request.org_id)
        publish_item(request)


def _resource_items(resource: Any) -> Any:
    """A resource's pending definition-change items (the request names the resource in its context: its `tool`
    foreign key is for tools)."""
    return ApprovalRequest.objects.filter(org_id=resource.org_id, kind=ApprovalKind.DEFINITION_CHANGE,
                                          tool__isnull=True, context__resource_id=str(resource.id),
                                          status=ApprovalStatus.PENDING)


def open_resource_change(*, resource: Any) -> ApprovalRequest | None:
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


def close_resource_changes(*, resource: Any) -> None:
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
        registry_resources.pin_resource(actor=actor, resource_id=resource_id)
        return
    if request.tool is None or request.tool.definition_hash != request.definition_hash:
        raise Conflict("The tool's definition changed again since this item was opened; review the new one.")
    registry.pin_tool(actor=actor, tool_id=request.tool_id)


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
