"""Writes for the approval inbox: open a request, record a person's vote.

Runs own "decide and resume" (`apps.runs.services.decide_approval`): it calls `record_vote`
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
from apps.approvals import selectors
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, ApprovalVote, VoteDecision
from apps.audit import services as audit
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.core.realtime import org_group, publish


def open_request(*, org_id: UUID | str, run_id: UUID | str | None, tool_call_id: UUID | str | None,
                 agent_id: UUID | str | None, tool_id: UUID | str | None, title: str, arguments: dict[str, Any],
                 args_hash: str, definition_hash: str, risk: str, reason: str, rule: str,
                 context: dict[str, Any], expires_at: datetime | None, requested_by_user_id: int | None,
                 required_approvals: int = 1, kind: str = ApprovalKind.TOOL_CALL) -> ApprovalRequest:
    """A pending request in the inbox. Publishes the new inbox count after commit."""
    request = ApprovalRequest.objects.create(
        org_id=org_id, kind=kind, run_id=run_id, tool_call_id=tool_call_id, agent_id=agent_id, tool_id=tool_id,
        title=title[:300], arguments=arguments, args_hash=args_hash, definition_hash=definition_hash, risk=risk,
        reason=reason[:500], rule=rule[:40], context=context, expires_at=expires_at,
        requested_by_user_id=requested_by_user_id, required_approvals=max(1, required_approvals))
    publish_inbox_count(org_id=org_id)
    return request


def publish_inbox_count(*, org_id: UUID | str) -> None:
    transaction.on_commit(lambda: _publish_count(org_id))


def _publish_count(org_id: UUID | str) -> None:
    publish(org_group(org_id), "inbox.count", count=selectors.pending_count(org_id=org_id))


def record_vote(*, actor: Actor, request: ApprovalRequest, decision: str, comment: str = "",
                arguments: dict[str, Any] | None = None, approved_args_hash: str = "") -> ApprovalRequest:
    """Adds one person's vote; decides the request when enough approvals are in or anyone rejects.

    Must run inside the caller's transaction with `request` locked (select_for_update).
    Raises PermissionDenied (role, separation of duties), Conflict (already decided, voted twice),
    ValidationFailed (bad decision).
    """
    actor.require("approvals.decide")
    if decision not in VoteDecision.values:
        raise ValidationFailed("Choose approve or reject.", {"decision": "Choose approve or reject."})
    if request.status != ApprovalStatus.PENDING:
        who = f" by {request.decided_by_label}" if request.decided_by_label else ""
        raise Conflict(f"This request was already {request.status}{who}.")
    if (decision == VoteDecision.APPROVE and request.risk == "dangerous" and actor.user_id is not None
            and actor.user_id == request.requested_by_user_id):
        raise PermissionDenied("You started this run, and the tool is dangerous: someone else must approve it.")
    try:
        with transaction.atomic():
            ApprovalVote.objects.create(org_id=request.org_id, request=request, user_id=actor.user_id,
                                        actor_label=actor.label, decision=decision, comment=comment,
                                        arguments=arguments)
    except IntegrityError:
        raise Conflict("You already voted on this request.") from None
    approvals = request.votes.filter(decision=VoteDecision.APPROVE).count()
    fields = ["comment", "updated_at"]
    request.comment = "\n".join(c for c in (request.comment, comment) if c)
    if arguments is not None:
        request.approved_arguments, request.approved_args_hash = arguments, approved_args_hash
        fields += ["approved_arguments", "approved_args_hash"]
    if decision == VoteDecision.REJECT or approvals >= request.required_approvals:
        request.status = ApprovalStatus.APPROVED if decision == VoteDecision.APPROVE else ApprovalStatus.REJECTED
        if request.status == ApprovalStatus.APPROVED and request.approved_arguments is None:
            request.approved_arguments, request.approved_args_hash = request.arguments, request.args_hash
            fields += ["approved_arguments", "approved_args_hash"]
        request.decided_at, request.decided_by_id, request.decided_by_label = timezone.now(), actor.user_id, actor.label
        fields += ["status", "decided_at", "decided_by", "decided_by_label"]
    request.save(update_fields=sorted(set(fields)))
    audit.record(org_id=request.org_id, actor=actor, action=f"approval.{decision}", target=request,
                 target_label=request.title, data={"status": request.status, "comment": comment,
                                                   "edited": arguments is not None})
    publish_inbox_count(org_id=request.org_id)
    return request


def expire_request(*, request: ApprovalRequest) -> ApprovalRequest:
    """Marks a pending request expired (its default outcome: reject). Caller holds the row lock."""
    if request.status != ApprovalStatus.PENDING:
        raise Conflict(f"This request was already {request.status}.")
    request.status, request.decided_at, request.decided_by_label = ApprovalStatus.EXPIRED, timezone.now(), "expiry"
    request.save(update_fields=["status", "decided_at", "decided_by_label", "updated_at"])
    audit.record(org_id=request.org_id, actor=None, action="approval.expired", target=request,
                 target_label=request.title)
    publish_inbox_count(org_id=request.org_id)
    return request
