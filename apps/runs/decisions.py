"""Deciding for a run: a person's vote on a held call and the resume it may start, approvals that expire,
a person's word on a call whose outcome is unknown."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import jsonschema
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import Model
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents.models import Agent
from apps.approvals import definition_changes
from apps.approvals import selectors as approval_selectors
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from apps.audit import services as audit
from apps.core import tracing
from apps.core.db import pipeline
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.metrics import APPROVAL_DECISION_SECONDS
from apps.core.rows import Columns, fetch_together, split
from apps.notifications import services as notifications
from apps.notifications.services import Channels
from apps.registry.models import McpServer, Tool
from apps.runs import ledger
from apps.runs.engine.hashing import args_hash
from apps.runs.ledger import append_event, publish_status, send_events
from apps.runs.models import CallState, Run, RunStatus, ToolCall
from apps.runs.outcome import writes_not_done
from apps.runs.queue import enqueue, enqueue_on_commit
from apps.runs.selectors import trace_parent

logger = logging.getLogger(__name__)


# --- decide and resume ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    """What a person's decision did, for the page or the API call that made it."""

    request: ApprovalRequest  # as it is after the commit (its agent, tool and server loaded)
    approvals: int  # approve votes so far, of `request.required_approvals`
    edited: bool  # the decider sent arguments with an approval (the edit form)


def decide(*, actor: Actor, approval_id: UUID | str, decision: str, arguments: dict[str, Any] | None = None,
           comment: str = "", standing: dict[str, Any] | None = None, expected_args_hash: str = "") -> Decision:
    """A person's decision from the inbox or the API: `decide_approval`, then the request as it is now.
    Raises what `decide_approval` raises."""
    decided = decide_approval(actor=actor, approval_id=approval_id, decision=decision, arguments=arguments,
                              comment=comment, standing=standing, expected_args_hash=expected_args_hash)
    given = getattr(decided, "approvals_given", None)
    if given is None:  # a tool-definition item (decided by apps.approvals.definition_changes): read it again
        request = approval_selectors.get_approval(org_id=actor.org_id, approval_id=approval_id)
        given = request.votes.filter(decision="approve").count()
    else:  # as this decision's transaction left it, its agent, tool, server and votes loaded
        request = decided
    return Decision(request=request, approvals=given, edited=arguments is not None and decision == "approve")


def decide_approval(*, actor: Actor, approval_id: UUID | str, decision: str, arguments: dict[str, Any] | None = None,
                    comment: str = "", standing: dict[str, Any] | None = None,
                    expected_args_hash: str = "") -> ApprovalRequest:
    """Records a person's decision on a held call and, when the run has nothing else pending, resumes it.

    Edited `arguments` are checked against the tool's input schema (field errors `arguments.<path>`).
    `expected_args_hash` (the hash of the arguments the person saw) refuses a decision made on
    arguments another approver has since edited.
    `standing` ({"scope": "call"/"run"/"agent_tool", "condition", "hours"}) also approves later calls
    (apps.approvals.standing). A tool-definition item is pinned or kept quarantined instead.
    Raises Conflict when already decided (HTTP 409), PermissionDenied, ValidationFailed, NotFound.
    """
    actor.require("approvals.decide")
    with transaction.atomic():
        # The request (its agent, tool and server as the decision's answer shows them) and its run, both locked.
        request, run, heard = _locked(org_id=actor.org_id, approval_id=approval_id)
        if request is None:
            raise NotFound("No such approval request.")
        if request.kind in (ApprovalKind.QUESTION, ApprovalKind.ELICITATION):
            raise Conflict("This item asks for an answer, not a decision: answer it instead.")
        if request.kind == ApprovalKind.DEFINITION_CHANGE:
            return definition_changes.decide_definition_change(actor=actor, approval_id=approval_id, decision=decision,
                                                      comment=comment)
        if expected_args_hash and expected_args_hash != (request.approved_args_hash or request.args_hash):
            raise Conflict("The arguments changed since you looked (another approver edited them): "
                           "review them again.")
        edited = None
        if arguments is not None and decision == "approve" and args_hash(arguments) != request.args_hash:
            _check_arguments(request, arguments)
            edited = arguments
        # The resume is enqueued first among this transaction's after-commit work (registered before the
        # vote's inbox count and notifications): the worker starts while those are still being sent.
        resume: list[UUID] = []
        transaction.on_commit(lambda: resume and enqueue(resume[0], resume=True))
        followed = None
        try:
            # The vote, the request's new state, the run's event and resume, the audit row and the COMMIT: one
            # round trip. Nothing in it reads an answer before the end (the votes so far, when a request needs
            # more than one, are read under the lock first).
            with pipeline(commit=True):
                request = approvals.record_vote(
                    actor=actor, request=request, decision=decision, comment=comment, arguments=edited,
                    approved_args_hash=args_hash(edited) if edited else "", standing_choice=standing, heard=heard)
                if run is not None and request.kind == ApprovalKind.TOOL_CALL:
                    followed = _follow_vote(run, request, actor=actor, decision=decision, comment=comment,
                                            edited=edited is not None)
                approvals.audit_vote(actor=actor, request=request, decision=decision, comment=comment,
                                     edited=arguments is not None)
        except IntegrityError as error:
            if approvals.second_vote(error):
                raise Conflict("You already voted on this request.") from None
            raise
        if followed is not None and followed():
            resume.append(run.id)
    return request


class _DecisionRead:
    """The decision's first round trip: the request row locked, with its agent, tool and server as an approval shows
    them (`approval_selectors.UNSHOWN` left in the table), then its run's row locked: requests before their run, the
    order `ledger.lock_pending_requests` takes them in. Of the run, only what a decision reads: its status. Two
    statements built once per process, sent together (apps/core/rows.py); as two ORM queries compiled on every
    decision they were ~40 % of its CPU."""

    def __init__(self) -> None:
        def shown(model: type[Model], relation: str) -> list[str]:
            hidden = {name.removeprefix(relation) for name in approval_selectors.UNSHOWN if name.startswith(relation)}
            return [field.name for field in model._meta.concrete_fields if field.name not in hidden]

        self.request = Columns.every(ApprovalRequest, "q")
        self.agent = Columns(Agent, shown(Agent, "agent__"), "a")
        self.tool = Columns(Tool, shown(Tool, "tool__"), "t")
        self.server = Columns(McpServer, shown(McpServer, "tool__server__"), "s")
        self.run = Columns(Run, ["id", "org", "status"], "r")
        features = connection.features
        request_lock = " FOR UPDATE OF q" if features.has_select_for_update_of else ""
        run_lock = " FOR UPDATE" if features.has_select_for_update else ""  # SQLite: one writer at a time
        self.sql = [
            f"SELECT {self.request.sql}, {self.agent.sql}, {self.tool.sql}, {self.server.sql} "  # noqa: S608
            f"FROM {self.request.table} q LEFT JOIN {self.agent.table} a ON a.id = q.agent_id "
            f"LEFT JOIN {self.tool.table} t ON t.id = q.tool_id LEFT JOIN {self.server.table} s ON s.id = t.server_id "
            f"WHERE q.id = %s AND q.org_id = %s{request_lock}",
            f"SELECT {self.run.sql} FROM {self.run.table} r WHERE r.id = (SELECT q.run_id "  # noqa: S608
            f"FROM {self.request.table} q WHERE q.id = %s AND q.org_id = %s){run_lock}",
        ]


@functools.cache
def _decision_read() -> _DecisionRead:
    return _DecisionRead()


def _locked(*, org_id: UUID | str, approval_id: UUID | str
            ) -> tuple[ApprovalRequest | None, Run | None, Channels | None]:
    """The organisation's request `approval_id` and its run (None when there is no such request, or it has no run),
    locked for the caller's transaction (`_DecisionRead`), and the channels the organisation hears a decision on
    (read in the same round trip: a decided request notifies them)."""
    read = _decision_read()
    try:
        keys = [read.request.param("id", approval_id), read.request.param("org", org_id)]
    except (ValueError, ValidationError):
        return None, None, None
    request_rows, run_rows, channel_rows = fetch_together(
        [(sql, keys) for sql in read.sql] + [notifications.channels_statement(org_id)])
    if not request_rows:
        return None, None, None
    request_row, agent_row, tool_row, server_row = split(request_rows[0], read.request, read.agent, read.tool,
                                                         read.server)
    request = read.request.instance(request_row)
    request.agent = read.agent.instance(agent_row) if request.agent_id else None
    if request.tool_id:
        request.tool = read.tool.instance(tool_row)
        request.tool.server = read.server.instance(server_row)
    else:
        request.tool = None
    return (request, read.run.instance(run_rows[0]) if run_rows else None,
            notifications.channels_from(channel_rows))


def _follow_vote(run: Run, request: ApprovalRequest, *, actor: Actor, decision: str, comment: str,
                 edited: bool) -> Callable[[], bool]:
    """The run's side of a vote, sent in the caller's batch (caller holds the run row lock): its event, and when the
    request is decided and nothing else is pending, waiting -> queued. Returns what, once the batch's answers are
    in, publishes the event and says whether the run was queued (the caller enqueues it)."""
    if request.status == ApprovalStatus.PENDING:  # M of N: more approvals needed
        published = send_events(run.id, [("approval.voted", {
            "approval_id": str(request.id), "decision": decision, "by": actor.label, "votes": request.votes_cast,
            "required": request.required_approvals})])
        queued = None
    else:
        published = send_events(run.id, [("approval.decided", {
            "approval_id": str(request.id), "tool_call_id": str(request.tool_call_id), "decision": request.status,
            "by": actor.label, "comment": comment[:500], "edited": edited})])
        if request.decided_at:
            APPROVAL_DECISION_SECONDS.labels(decision=request.status).observe(
                (request.decided_at - request.created_at).total_seconds())
            tracing.record("approval.wait", start=request.created_at, end=request.decided_at,
                           parent=trace_parent(run.id), run_id=run.id, decision=request.status,
                           approval_id=request.id, title=request.title, by=actor.label)
        queued = send_resume(run, enqueue=False)

    def answered() -> bool:
        published()
        return queued is not None and queued()
    return answered


def expire_due_approvals() -> int:
    """Beat: pending requests past `expires_at` take their default outcome (reject, as `expired`);
    each run with nothing else pending resumes and its model hears the call was not approved in time.
    Returns how many expired."""
    due = list(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=timezone.now())
               .values_list("id", flat=True)[:500])
    expired = 0
    for approval_id in due:
        with transaction.atomic():
            request = ApprovalRequest.objects.select_for_update().filter(
                id=approval_id, status=ApprovalStatus.PENDING).first()
            if request is None:
                continue
            run = Run.objects.select_for_update().filter(id=request.run_id).first() if request.run_id else None
            approvals.expire_request(request=request)
            expired += 1
            if run is not None and request.kind in (ApprovalKind.TOOL_CALL, ApprovalKind.QUESTION) \
                    and not run.is_finished:
                append_event(run.id, "approval.decided", approval_id=str(request.id),
                             tool_call_id=str(request.tool_call_id), decision=request.status, by="expiry")
                resume_if_ready(run)
    return expired


def _check_arguments(request: ApprovalRequest, arguments: Any) -> None:
    if not isinstance(arguments, dict):
        raise ValidationFailed("Arguments must be a JSON object.", {"arguments": "Must be a JSON object."})
    schema = request.tool.input_schema if request.tool_id and request.tool else {}
    errors = {}
    for error in jsonschema.Draft202012Validator(schema or {}).iter_errors(arguments):
        path = ".".join(str(p) for p in error.absolute_path)
        errors[f"arguments.{path}" if path else "arguments"] = error.message
    if errors:
        raise ValidationFailed("The edited arguments do not match the tool's input schema.", errors)


# Waiting -> queued in one statement, only when no approval of the run is pending and no call is unknown.
# Plain SQL: compiling the two subqueries through the ORM cost ~2 ms on every decision, before the commit
# the resume waits for. RETURNING, not the row count: in a batch the count is not known until its end.
_RESUME_SQL = """
UPDATE runs_run SET status = 'queued', updated_at = %s
WHERE id = %s AND status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM approvals_approvalrequest a WHERE a.run_id = runs_run.id AND a.status = 'pending')
  AND NOT EXISTS (SELECT 1 FROM runs_toolcall t WHERE t.run_id = runs_run.id AND t.state = 'unknown')
RETURNING id
"""


def resume_if_ready(run: Run, *, enqueue: bool = True) -> bool:
    """Caller holds the run row lock. Waiting and nothing pending -> queued, resume enqueued on commit
    (`enqueue=False`: the caller enqueues it). Says whether the run was queued."""
    return send_resume(run, enqueue=enqueue)()


def send_resume(run: Run, *, enqueue: bool = True) -> Callable[[], bool]:
    """`resume_if_ready` in two halves, for a batch (apps.core.db.pipeline): sends the UPDATE now and returns what
    reads whether it queued the run (then publishes the status and enqueues the resume), to be called once the
    batch's answers are in."""
    if run.status != RunStatus.WAITING:
        return lambda: False
    now = timezone.now()
    connection = connections[Run.objects.db]
    cursor = connection.cursor()  # left open: the batch sets its results after this returns
    cursor.execute(_RESUME_SQL, [Run._meta.get_field("updated_at").get_db_prep_value(now, connection),
                                 Run._meta.pk.get_db_prep_value(run.id, connection)])

    def queued() -> bool:
        with cursor:
            if cursor.fetchone() is None:
                return False
        run.status, run.updated_at = RunStatus.QUEUED, now
        publish_status(run)
        if enqueue:
            enqueue_on_commit(run.id, resume=True)
        return True
    return queued


def resolve_unknown_call(*, actor: Actor, tool_call_id: UUID | str, outcome: str, note: str = "") -> ToolCall:
    """A person checked the target system: the `unknown` call did (`succeeded`) or did not (`failed`) happen.

    The note reaches the model as the call's result. Never re-sends the call. Raises Conflict, NotFound.
    """
    actor.require("approvals.decide")
    if outcome not in ("succeeded", "failed"):
        raise ValidationFailed("Say whether the call happened.", {"outcome": "Choose succeeded or failed."})
    with transaction.atomic():
        row = ToolCall.objects.select_for_update().filter(org_id=actor.org_id, id=tool_call_id).first()
        if row is None:
            raise NotFound("No such tool call.")
        run = Run.objects.select_for_update().get(id=row.run_id)
        if row.state != CallState.UNKNOWN:
            raise Conflict(f"This call is {row.state}, not unknown.")
        text = note.strip() or ("A person confirmed the call happened." if outcome == "succeeded" else
                                "A person confirmed the call did not happen.")
        ledger.resolve_unknown(run, row, outcome=outcome, text=text, by=actor.label)
        audit.record(org_id=actor.org_id, actor=actor, action="tool_call.resolved", target=row,
                     target_label=row.qualified_name, data={"outcome": outcome, "note": note[:500]})
        if run.is_finished:  # resolved after the run ended (cancelled while it waited): its attention follows
            run.attention = writes_not_done(run_id=run.id, tools=run.snapshot.get("tools", {}))
            run.save(update_fields=["attention", "updated_at"])
        approvals.publish_inbox_count(org_id=actor.org_id)  # one item fewer in the inbox
        resume_if_ready(run)
    return row
