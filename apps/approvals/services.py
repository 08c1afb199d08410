"""Writes for the approval inbox: open a request, record a person's vote.

Runs own "decide and resume" (`apps.runs.decisions.decide_approval`): it calls `record_vote`
inside its own transaction, then queues the run. Only people vote: an actor without
`approvals.decide` is refused, and nothing a model or tool produces reaches these functions.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError
from django.db.utils import Error as DatabaseError
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.approvals import selectors, standing
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, ApprovalVote, VoteDecision
from apps.audit import services as audit
from apps.core.db import pipeline
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.core.realtime import org_group, publish_after_commit
from apps.core.rows import Columns, Inserts, Update, cache_related, fetch
from apps.notifications.services import Channels, channels_from, channels_statement, notify


def open_request(*, org_id: UUID | str, run_id: UUID | str | None, tool_call_id: UUID | str | None,
                 agent_id: UUID | str | None, tool_id: UUID | str | None, title: str, arguments: dict[str, Any],
                 args_hash: str, definition_hash: str, risk: str, reason: str, rule: str,
                 context: dict[str, Any], expires_at: datetime | None, requested_by_user_id: int | None,
                 required_approvals: int = 1, kind: str = ApprovalKind.TOOL_CALL,
                 separation_of_duties: bool = False, tool_name: str | None = None,
                 batch: bool = False) -> ApprovalRequest:
    """A pending request in the inbox. Publishes the new inbox count after commit. `tool_name`: the tool's
    qualified name, when the caller has it (else the notification reads the tool for it). `batch`: the INSERT
    goes out with the read of the organisation's channels that `notify` needs next, one round trip for both
    (apps.core.db.pipeline), for a caller whose own writes go in its transaction's last batch (the run engine's
    store)."""
    request = ApprovalRequest(
        org_id=org_id, kind=kind, run_id=run_id, tool_call_id=tool_call_id, agent_id=agent_id, tool_id=tool_id,
        title=title[:300], arguments=arguments, args_hash=args_hash, definition_hash=definition_hash, risk=risk,
        reason=reason[:500], rule=rule[:40], context=context, expires_at=expires_at,
        requested_by_user_id=requested_by_user_id, required_approvals=max(1, required_approvals),
        separation_of_duties=separation_of_duties)
    heard = None
    if batch:
        heard = _insert_hearing_channels(request)
    else:
        request.save(force_insert=True)
    publish_inbox_count(org_id=org_id)
    publish_item(request)
    notify(org_id=org_id, event="approval.requested", payload=notification_payload(request, tool_name=tool_name),
           heard=heard)
    return request


def _insert_hearing_channels(request: ApprovalRequest) -> Channels:
    sql, params = channels_statement(request.org_id)
    with pipeline():
        _request_inserts().send([request])
        found = fetch(sql, params)  # waits for both answers
    return channels_from(found)


@functools.cache
def _request_inserts() -> Inserts:
    return Inserts(ApprovalRequest)


def publish_item(request: ApprovalRequest) -> None:
    """Every open inbox adds, refreshes or removes this item (with who decided) after commit."""
    publish_after_commit(org_group(request.org_id), "inbox.changed", approval_id=str(request.id),
                         status=request.status, by=request.decided_by_label)


def notification_payload(request: ApprovalRequest, *, tool_name: str | None = None) -> dict[str, Any]:
    return {"approval_id": str(request.id), "kind": request.kind, "status": request.status, "title": request.title,
            "run_id": str(request.run_id) if request.run_id else None, "risk": request.risk, "reason": request.reason,
            "tool": tool_name or (request.tool.qualified_name if request.tool_id and request.tool else None),
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
                standing_choice: dict[str, Any] | None = None, heard: Channels | None = None) -> ApprovalRequest:
    """Adds one person's vote; decides the request when enough approvals are in or anyone rejects.

    Must run inside the caller's transaction with `request` locked (select_for_update); the caller then writes
    the vote's audit row with `audit_vote`, last before its commit. Its writes read nothing back: the caller may
    send them in one batch (apps.core.db.pipeline), and then learns a second vote of one person as the batch
    ends (`second_vote`). The request comes back with its votes loaded (`request.votes.all()`, no query).
    `standing_choice` ({"scope": "call"/"run"/"agent_tool", "condition", "hours"}) also creates a
    standing approval when the request ends approved (never for dangerous tools).
    `heard`: the organisation's notification channels, when the caller read them with its own reads.
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
    # whether this person already voted (by any token or session: a vote is the member's), the counts
    # after this vote, and the votes the answer lists. A pending request that needs one approval has none
    # (its first vote decides it), so the usual decision skips the read.
    cast = _votes_of(request.id) if request.required_approvals > 1 else []
    if any(vote.user_id == actor.user_id for vote in cast):
        raise Conflict("You already voted on this request.")
    vote = ApprovalVote(org_id=request.org_id, request=request, user_id=actor.user_id, actor_label=actor.label,
                        decision=decision, comment=comment, arguments=arguments)
    try:
        # No savepoint: an IntegrityError here (approval_vote_once) ends the caller's transaction, which
        # rolls back as the Conflict leaves it; nothing catches it to carry on.
        _vote_inserts().send([vote])
    except IntegrityError:
        raise Conflict("You already voted on this request.") from None
    cache_related(request, "votes", [*cast, vote])
    approvals = sum(1 for v in cast if v.decision == VoteDecision.APPROVE) + (decision == VoteDecision.APPROVE)
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
    request.updated_at = timezone.now()
    _request_update(tuple(sorted(set(fields)))).save(request)
    if chosen and request.status == ApprovalStatus.APPROVED:
        standing.create_standing(actor=actor, request=request, **chosen)
    publish_inbox_count(org_id=request.org_id)
    publish_item(request)
    if request.status != ApprovalStatus.PENDING:
        notify(org_id=request.org_id, event="approval.decided", payload=notification_payload(request), heard=heard)
    return request


def second_vote(error: DatabaseError) -> bool:
    """Whether `error` is the database refusing a person's second vote on one request (`approval_vote_once`), as a
    batch that sent `record_vote`'s writes raises it at its end."""
    return "approval_vote_once" in str(error)


def _votes_of(request_id: UUID | str) -> list[ApprovalVote]:
    """A request's votes, in the order an approval lists them (ApprovalVote's own): one statement built once."""
    votes, sql = _votes_read()
    return [votes.instance(row) for row in fetch(sql, [votes.param("request", request_id)])]


@functools.cache
def _votes_read() -> tuple[Columns, str]:
    votes = Columns.every(ApprovalVote, "v")
    return votes, f"SELECT {votes.sql} FROM {votes.table} v WHERE v.request_id = %s ORDER BY v.created_at"  # noqa: S608


# A vote's two writes, built once per process (apps/core/rows.py): compiled by the ORM on every decision they cost
# more CPU than their round trips. Nothing listens to these models' signals.
@functools.cache
def _vote_inserts() -> Inserts:
    return Inserts(ApprovalVote)


@functools.cache
def _request_update(fields: tuple[str, ...]) -> Update:
    return Update(ApprovalRequest, fields, ["id"])


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
