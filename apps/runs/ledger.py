"""The run ledger: every state change of a tool call and every run event goes through this module.

A tool call (`ToolCall`) moves `proposed -> held/denied/dispatched -> approved/... -> succeeded/failed/
unknown` only by a conditional UPDATE here (`move_call`), which also appends the transition's event, counts
an `unknown` into the inbox and audits a policy denial (`applied`). Run events are numbered here alone (the
per-run `seq`, under the run row's lock) and redacted here alone (`apps.audit.redaction.redact`), the
claim's event included (`claim_run`, one statement with the compare-and-set).

Two callers: the engine's store (apps/runs/store/), which passes its own `emit` so a step's events go out
in one statement at the end of its transaction, and the gateway (apps/gateway/ledger.py), which passes
`events_now(run_id)` and writes its batches with `record_calls`. The fast paths the engine's step needs
(pipelined inserts and the completion's UPDATE, `send_*`) sit beside their plain twins here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connections, transaction
from django.db.models import F, Model, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.approvals import services as approvals
from apps.approvals.models import ApprovalRequest, ApprovalStatus
from apps.audit import services as audit
from apps.audit.org_secrets import OrgSecrets, redact_outside
from apps.audit.redaction import redact
from apps.core.db import pipeline, send_expected
from apps.core.realtime import org_group, publish_after_commit, run_group
from apps.core.rows import Columns, Inserts, Update, fetch, fetch_together
from apps.notifications.services import notify
from apps.runs.engine.errors import LeaseLost
from apps.runs.engine.hashing import args_hash
from apps.runs.lease import SWEPT, lease_seconds
from apps.runs.models import CallState, Run, RunEvent, RunStatus, RunStep, StepKind, ToolCall
from apps.runs.outcome import not_done_statement, writes_not_done_from

APPROVAL_TTL = timedelta(hours=24)

# One statement on Postgres: the UPDATE takes the run row's lock (held to commit, so seqs stay
# gapless and in commit order) and hands its new last_seq to the INSERT: one round trip per event
# rather than three (a lock, the counter, the row), and an engine step appends about five.
_APPEND_SQL = """
WITH next AS (UPDATE runs_run SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq)
INSERT INTO runs_runevent (run_id, seq, type, data, at) SELECT %s, last_seq, %s, %s::jsonb, %s FROM next
RETURNING seq
"""


def append_event(run_id: UUID | str, type: str, **data: Any) -> RunEvent:
    """Takes the run row's lock for the sequence number; call inside the transaction of the change."""
    data, at = redact(data), timezone.now()
    connection = connections[RunEvent.objects.db]
    if connection.vendor == "postgresql":
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(_APPEND_SQL, [str(run_id), str(run_id), type, json.dumps(data), at])
            row = cursor.fetchone()
        if row is None:
            raise Run.DoesNotExist(f"No run {run_id}.")
        event = RunEvent(run_id=run_id, seq=row[0], type=type, data=data, at=at)
    else:
        with transaction.atomic(savepoint=False):
            run = Run.objects.select_for_update().only("id", "org_id", "last_seq").get(id=run_id)
            seq = run.last_seq + 1
            Run.objects.filter(id=run_id).update(last_seq=seq)
            event = RunEvent.objects.create(run_id=run_id, seq=seq, type=type, data=data)
    _publish(run_id, event.seq, type, data, at)
    return event


# A run page's socket sends an event carried by its nudge straight away when it is the next one it
# expects; otherwise (a gap, a coalesced burst, a big event) it reads the table.
CARRIED_EVENT_BYTES = 4096


def _publish(run_id: UUID | str, seq: int, type: str, data: dict[str, Any], at: Any, encoded: str = "") -> None:
    event = {"seq": seq, "type": type, "data": data, "at": at.isoformat()}
    carried = len(encoded or json.dumps(data, default=str)) <= CARRIED_EVENT_BYTES
    publish_after_commit(run_group(run_id), "run.event", run_id=str(run_id), seq=seq, type=type,
                         **({"carried": event} if carried else {}))


@dataclass
class Totals:
    """What a transaction adds to its run's counters (a model call's tokens and cost, its tool calls),
    written by the statement that appends the transaction's events: the run row is updated there anyway."""

    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    tool_calls: int = 0
    cost_usd: Decimal = Decimal(0)
    cost_unknown_calls: int = 0  # a call with no known price makes the run's cost unknown (NULL) for good

    def __bool__(self) -> bool:
        return self != Totals()

    def __add__(self, other: Totals) -> Totals:
        return Totals(**{name: getattr(self, name) + getattr(other, name) for name in self.__dataclass_fields__})

    def add_to(self, run: Run) -> None:
        """The same increments on the row in memory (the lease holder is the only writer of its counters)."""
        for name in ("tokens_in", "tokens_out", "tokens_cached", "tool_calls", "cost_unknown_calls"):
            setattr(run, name, getattr(run, name) + getattr(self, name))
        run.cost_usd = None if self.cost_unknown_calls or run.cost_usd is None else run.cost_usd + self.cost_usd

    def updates(self) -> dict[str, Any]:
        """The same increments as ORM expressions (SQLite, or no event batch)."""
        return {"tokens_in": F("tokens_in") + self.tokens_in, "tokens_out": F("tokens_out") + self.tokens_out,
                "tokens_cached": F("tokens_cached") + self.tokens_cached,
                "tool_calls": F("tool_calls") + self.tool_calls,
                "cost_usd": None if self.cost_unknown_calls else F("cost_usd") + self.cost_usd,
                "cost_unknown_calls": F("cost_unknown_calls") + self.cost_unknown_calls}


# Several events of one transaction in one statement: the run row's lock, `n` sequence numbers and the
# transaction's `Totals` at once, the rows from an array of types and a JSON array of payloads, zipped in their
# order (`ROWS FROM ... WITH ORDINALITY`). The payloads go as one JSON text: as a text[] each element's quotes
# would be escaped on the client, a regex replacement per quote.
_APPEND_MANY_SQL = """
WITH next AS (
  UPDATE runs_run SET last_seq = last_seq + %s, tokens_in = tokens_in + %s, tokens_out = tokens_out + %s,
    tokens_cached = tokens_cached + %s, tool_calls = tool_calls + %s, cost_unknown_calls = cost_unknown_calls + %s,
    cost_usd = CASE WHEN %s > 0 THEN NULL ELSE cost_usd + %s END
  WHERE id = %s RETURNING last_seq)
INSERT INTO runs_runevent (run_id, seq, type, data, at)
SELECT %s, next.last_seq - %s + e.ord, e.type, e.data, %s
FROM next, ROWS FROM (unnest(%s::text[]), jsonb_array_elements(%s::jsonb)) WITH ORDINALITY AS e(type, data, ord)
RETURNING seq
"""


def append_events(run_id: UUID | str, events: list[tuple[str, dict[str, Any]]], totals: Totals | None = None, *,
                  publish_last: int | None = None) -> None:
    """`append_event` for a batch, in order, and the run's `totals`: one statement on Postgres (the engine's
    store sends each transaction's events this way, at its end). `publish_last`: only the last so many are
    published (a gateway batch; pages read the rest from the table)."""
    with transaction.atomic(savepoint=False):
        send_events(run_id, events, totals, publish_last=publish_last)()


def send_events(run_id: UUID | str, events: list[tuple[str, dict[str, Any]]],
                totals: Totals | None = None, *, publish_last: int | None = None) -> Callable[[], None]:
    """`append_events` in two halves, for a batch (apps.core.db.pipeline): sends the statement now and returns
    what reads its sequence numbers and publishes them, to be called once the batch's answers are in. Call
    inside the transaction of the change. One event goes the same way (`append_event` would wait for its
    sequence number in the middle of the batch)."""
    connection = connections[RunEvent.objects.db]
    if connection.vendor != "postgresql" or not events:
        if totals:
            Run.objects.filter(id=run_id).update(**totals.updates())
        for type, data in events:
            append_event(run_id, type, **data)
        return lambda: None
    totals = totals or Totals()
    at, n = timezone.now(), len(events)
    types = [type for type, _ in events]
    redacted = [redact(data) for _, data in events]
    payloads = [json.dumps(data) for data in redacted]
    cursor = connection.cursor()
    cursor.execute(_APPEND_MANY_SQL, [
        n, totals.tokens_in, totals.tokens_out, totals.tokens_cached, totals.tool_calls,
        totals.cost_unknown_calls, totals.cost_unknown_calls, totals.cost_usd, str(run_id),
        str(run_id), n, at, types, f"[{','.join(payloads)}]"])

    def published() -> None:
        with cursor:
            seqs = sorted(row[0] for row in cursor.fetchall())
        if not seqs:
            raise Run.DoesNotExist(f"No run {run_id}.")
        rows = list(zip(seqs, types, redacted, payloads, strict=True))
        for seq, type, data, encoded in rows[-publish_last:] if publish_last else rows:
            _publish(run_id, seq, type, data, at, encoded)

    return published


def publish_status(run: Run) -> None:
    publish_after_commit(org_group(run.org_id), "run.status", run_id=str(run.id), status=run.status)


# --- tool calls ------------------------------------------------------------------------------------------

# Appends a run event: `emit(type, **data)`. The engine's store passes its own (a step's events go out together
# at the end of its transaction); everyone else `events_now`.
Emit = Callable[..., None]


def events_now(run_id: UUID | str) -> Emit:
    """An `Emit` appending each event at once, in the caller's transaction."""
    def emit(type: str, **data: Any) -> None:
        append_event(run_id, type, **data)
    return emit


@dataclass(frozen=True)
class Decided:
    """A row's way out of `proposed` (the policy allowed it) or `held` (a person approved it), written with
    `dispatched` in the transaction that commits it: one commit before the call leaves."""

    expect: str  # the row's state now
    fields: dict[str, Any]
    event: str
    event_data: dict[str, Any]
    by_policy_now: bool = False  # decided this step from the same registry read: no re-check needed


@dataclass
class CallRun:
    """What a transition needs of its run: the org (inbox count, audit) and the crew's name (audit)."""

    id: Any
    org_id: Any
    crew_name: str = ""


def move_call(run: Run | CallRun, row: ToolCall, *, expect: str, emit: Emit, event: str | None = None,
              event_data: dict[str, Any] | None = None, **fields: Any) -> bool:
    """A conditional transition `expect -> fields['state']`, with its event. False when the row was not in
    `expect` (another worker moved it)."""
    values = _move_values(fields)
    moved = _call_move(tuple(values)).execute({**values, "updated_at": timezone.now()}, {"id": row.id, "state": expect})
    if not moved:
        return False
    applied(run, row, event=event, event_data=event_data, fields=fields, emit=emit)
    return True


def _move_values(fields: dict[str, Any]) -> dict[str, Any]:
    meta = ToolCall._meta
    return {meta.get_field(name).name: value.pk if isinstance(value, Model) else value
            for name, value in fields.items()}


@functools.cache
def _call_move(fields: tuple[str, ...]) -> Update:
    """A call's conditional transition (`move_call`), built once per set of fields: a call moves at every step
    (dispatched, completed; approved after a decision), and the ORM compiled the UPDATE each time."""
    return Update(ToolCall, [*fields, "updated_at"], ["id", "state"])


def applied(run: Run | CallRun, row: ToolCall, *, fields: dict[str, Any], emit: Emit, event: str | None = None,
            event_data: dict[str, Any] | None = None) -> None:
    """What follows a transition written (by `move_call` or a batch): the row in memory, its event, the inbox
    count when it became `unknown`, the audit row of a policy denial."""
    for key, value in fields.items():
        setattr(row, key, value)
    if event:
        emit(event, tool_call_id=str(row.id), tool=row.qualified_name, **(event_data or {}))
    if fields.get("state") == CallState.UNKNOWN:  # a person must resolve it: it joins the inbox's count
        approvals.publish_inbox_count(org_id=run.org_id)
    if fields.get("state") == CallState.DENIED:  # policy denials (at offer or dispatch) are audited
        audit.record(org_id=run.org_id, actor=None, action="policy.denied", target=row,
                     target_label=row.qualified_name,
                     data={"run_id": str(run.id), "crew": run.crew_name, "rule": row.rule,
                           "reason": row.reason[:500], "args_hash": row.args_hash})


def decision_fields(*, state: str, decision: str, rule: str, reason: str, error_class: str = "") -> dict[str, Any]:
    """`proposed -> state` by the policy, as fields and the `tool.decided` event's data."""
    return dict(state=state, decision=decision, rule=rule, reason=reason, error_class=error_class,
                decided_at=timezone.now(), event="tool.decided",
                event_data={"decision": decision, "state": state, "rule": rule, "reason": reason})


def completion(org_id: Any, *, state: str, result: dict[str, Any] | None, error: str = "", error_class: str = "",
               findings: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`dispatched -> state` with its outcome: the fields and the `tool.completed` event's data. An error and
    an error result came from the server: they (and the findings quoting them) are redacted first."""
    if error or (result and result.get("is_error")):
        secrets = OrgSecrets(org_id)  # findings quote the result (a URL it mentions)
        error, result, findings = secrets.redact(error), secrets.redact_all(result), secrets.redact_all(findings)
    fields = dict(state=state, result=result, error=error[:4000], error_class=error_class,
                  findings=findings or [], finished_at=timezone.now())
    event_data = {"state": state, "is_error": bool(result and result.get("is_error")), "error": error[:300],
                  "findings": len(findings or [])}
    return fields, event_data


def complete_call(run: Run | CallRun, row: ToolCall, *, emit: Emit, state: str, result: dict[str, Any] | None,
                  error: str = "", error_class: str = "", findings: list[dict[str, Any]] | None = None) -> bool:
    """`dispatched -> state`; False when the row is no longer `dispatched`."""
    fields, event_data = completion(run.org_id, state=state, result=result, error=error, error_class=error_class,
                                    findings=findings)
    return move_call(run, row, expect=CallState.DISPATCHED, emit=emit, event="tool.completed",
                     event_data=event_data, **fields)


def hold_call(run: Run, row: ToolCall, *, emit: Emit, rule: str, reason: str, tool: dict[str, Any] | None,
              turn: RunStep, required_approvals: int = 1) -> ApprovalRequest:
    """`proposed -> held` and an approval request in the inbox, in one transaction."""
    with transaction.atomic(savepoint=False):
        request = hold_request(run, row, rule=rule, reason=reason, tool=tool, turn=turn,
                               required_approvals=required_approvals)
        fields, event_data = hold_fields(request, rule=rule, reason=reason)
        move_call(run, row, expect=CallState.PROPOSED, emit=emit, event="tool.decided", event_data=event_data,
                  **fields)
        requested(row, request, reason=reason, emit=emit)
    return request


def hold_request(run: Run, row: ToolCall, *, rule: str, reason: str, tool: dict[str, Any] | None, turn: RunStep,
                 required_approvals: int = 1, batch: bool = False) -> ApprovalRequest:
    """The approval request a held call waits on, in the caller's transaction (`batch`: see
    `approvals.open_request`). The crew's rules for its requests apply: their time to live, at least its number of
    approvals, the separation of duties."""
    crew = run.snapshot.get("crew", {})
    ttl = timedelta(hours=crew["approval_ttl_hours"]) if crew.get("approval_ttl_hours") else APPROVAL_TTL
    return approvals.open_request(
        org_id=run.org_id, run_id=run.id, tool_call_id=row.id, agent_id=turn.agent_id,
        tool_id=(tool or {}).get("id"), title=f"{row.qualified_name} by {turn.agent_name}",
        arguments=row.arguments, args_hash=row.args_hash, definition_hash=row.definition_hash,
        risk=(tool or {}).get("risk", ""), reason=reason, rule=rule,
        context={"task": turn.task, "agent": turn.agent_name, "crew": run.crew_name,
                 "crew_id": str(run.crew_id) if run.crew_id else None,
                 "server": (tool or {}).get("server", ""), "trust_tier": (tool or {}).get("trust_tier", ""),
                 "description": (tool or {}).get("description", ""), "tainted": run.tainted},
        expires_at=timezone.now() + ttl, requested_by_user_id=run.started_by_id,
        required_approvals=max(required_approvals, int(crew.get("approvals_required") or 1)),
        separation_of_duties=bool(crew.get("separation_of_duties")), tool_name=(tool or {}).get("qualified_name"),
        batch=batch)


def hold_fields(request: ApprovalRequest, *, rule: str, reason: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`proposed -> held` on `request`: the row's fields and the `tool.decided` event's data."""
    return (dict(state=CallState.HELD, decision="hold", rule=rule, reason=reason, approval=request,
                 decided_at=timezone.now()),
            {"decision": "hold", "state": "held", "rule": rule, "reason": reason})


def requested(row: ToolCall, request: ApprovalRequest, *, reason: str, emit: Emit) -> None:
    """The run's `approval.requested` event, after the call's `tool.decided`."""
    emit("approval.requested", approval_id=str(request.id), tool_call_id=str(row.id), tool=row.qualified_name,
         reason=reason)


def approval_outcome(row: ToolCall, request: ApprovalRequest | None) -> Decided | None:
    """How a held row follows its decided approval; None while it is pending. An approval's way out carries
    no state: it is written with `dispatched` (the engine, about to dispatch) or as `approved`
    (`follow_approval`). A rejection, an expiry or an approval of other arguments moves it to `rejected` or
    `expired`."""
    if request is None or request.status == "pending":
        return None
    if request.status == "approved":
        approved = request.approved_arguments if request.approved_arguments is not None else request.arguments
        if request.args_hash != row.args_hash or (request.approved_args_hash and
                                                  request.approved_args_hash != args_hash(approved)):
            return Decided(expect=CallState.HELD, event="tool.decided",
                           fields={"state": CallState.REJECTED, "error_class": "permission",
                                   "reason": "The approval does not match these arguments, so the call was not made."},
                           event_data={"decision": "deny", "state": "rejected"})
        return Decided(expect=CallState.HELD, fields={"approved_arguments": approved}, event="approval.applied",
                       event_data={"edited": approved != row.arguments, "by": request.decided_by_label})
    comment = request.comment.strip()
    if request.status == "answered":  # not run: the person's words are the call's result
        by = request.decided_by_label
        return Decided(expect=CallState.HELD, event="tool.decided",
                       fields={"state": CallState.REJECTED, "error_class": "answered",
                               "reason": f"A person ({by}) answered instead of running this call.",
                               "result": {"person": by, "text": comment}},
                       event_data={"decision": "answered", "state": CallState.REJECTED, "by": by, "answer": comment})
    reason = (f"A person ({request.decided_by_label}) rejected this call" + (f": {comment}" if comment else ".")
              if request.status == "rejected" else "Nobody approved this call in time; it expired (rejected).")
    state = CallState.REJECTED if request.status == "rejected" else CallState.EXPIRED
    return Decided(expect=CallState.HELD, fields={"state": state, "reason": reason, "error_class": "permission"},
                   event="tool.decided", event_data={"decision": "deny", "state": state, "reason": reason})


def follow_approval(run: Run | CallRun, row: ToolCall, request: ApprovalRequest | None, *, emit: Emit) -> None:
    """A held row whose approval was decided moves on: `approved` with the approved arguments, or rejected."""
    outcome = approval_outcome(row, request)
    if outcome is not None:
        move_call(run, row, expect=outcome.expect, emit=emit, event=outcome.event, event_data=outcome.event_data,
                  **{"state": CallState.APPROVED, **outcome.fields})


def resolve_unknown(run: Run, row: ToolCall, *, outcome: str, text: str, by: str) -> None:
    """A person's word on an `unknown` call (`succeeded` or `failed`); the caller holds the row's lock."""
    row.state, row.result = outcome, {"text": text, "is_error": outcome == "failed", "structured": None,
                                      "truncated": False, "resolved": True}
    row.resolved_by, row.finished_at = by, timezone.now()
    row.save(update_fields=["state", "result", "resolved_by", "finished_at", "updated_at"])
    append_event(run.id, "tool.resolved", tool_call_id=str(row.id), tool=row.qualified_name, outcome=outcome, by=by)


def insert_call(*, org_id: Any, run_id: Any, state: str, count: bool = False, **fields: Any) -> ToolCall:
    """A ledger row created outside an engine step (the gateway's): `proposed`, or `dispatched` committed before
    a non-read call leaves. `count`: it joins the run's `tool_calls` now (else with its completion's batch)."""
    row = ToolCall.objects.create(org_id=org_id, run_id=run_id, state=state, **fields)
    if count:
        Run.objects.filter(id=run_id).update(tool_calls=F("tool_calls") + 1)
    return row


def new_calls(*, org_id: Any, run_id: Any, step: RunStep, calls: list[dict[str, Any]]) -> list[ToolCall]:
    """A model call's `proposed` rows, in memory, with their ids: the store sends them with the step's batch
    (`send_new_calls`)."""
    return [ToolCall(org_id=org_id, run_id=run_id, step=step, position=position, **call)
            for position, call in enumerate(calls)]


def calls_lost_in_flight(rows: Any, *, error: str) -> int:
    """`dispatched -> unknown` for rows whose sender died (a person checks). No event: the run is not driven by
    a worker that would read it, and the inbox lists the rows."""
    return rows.filter(state=CallState.DISPATCHED).update(state=CallState.UNKNOWN, error_class="transient",
                                                         error=error, updated_at=timezone.now())


@dataclass
class Outcome:
    """One finished (or denied) call of a batch (`record_calls`): a new row, or the completion of one
    committed `dispatched` before it left (`row_id`)."""

    id: str
    org_id: Any
    run_id: Any
    fields: dict[str, Any]
    row_id: str | None = None
    event: str = "tool.completed"
    event_data: dict[str, Any] = field(default_factory=dict)
    taint: str = ""  # a reason to mark the run tainted


COMPLETABLE = {"state", "result", "error", "error_class", "findings", "finished_at", "reason", "rule"}


def record_calls(batch: Iterable[Outcome], *, publish_per_run: int | None = None) -> list[ToolCall]:
    """A batch of finished calls in the caller's transaction: the new rows, the completions, then per run its
    events (numbered and redacted here), its `tool_calls` counter and its taint. Returns the rows, in the
    batch's order (for their audit).

    The rows, completions and events go out as one batch (apps.core.db.pipeline): one round trip, where each
    had been one of its own. A completion whose row is no longer `dispatched` (a person resolved it as
    `unknown` meanwhile) changes nothing, as before."""
    now = timezone.now()
    rows: list[tuple[Outcome, ToolCall]] = []
    new = []
    with pipeline():
        for outcome in batch:
            if outcome.row_id:
                values = _move_values({k: v for k, v in outcome.fields.items() if k in COMPLETABLE})
                _call_move(tuple(values)).execute({**values, "updated_at": now},
                                                  {"id": outcome.row_id, "state": CallState.DISPATCHED})
                rows.append((outcome, ToolCall(id=outcome.row_id,
                                               qualified_name=outcome.fields.get("qualified_name"))))
            else:
                row = ToolCall(id=outcome.id, org_id=outcome.org_id, run_id=outcome.run_id, **outcome.fields)
                new.append(row)
                rows.append((outcome, row))
        _call_inserts().send(new)
        by_run: dict[str, list[tuple[Outcome, ToolCall]]] = {}
        for outcome, row in rows:
            by_run.setdefault(str(outcome.run_id), []).append((outcome, row))
        published = [send_events(run_id, [
            (outcome.event, {"tool_call_id": str(row.id), "tool": outcome.fields.get("qualified_name", ""),
                             "via": "gateway", **outcome.event_data}) for outcome, row in items],
            Totals(tool_calls=len(items)), publish_last=publish_per_run) for run_id, items in by_run.items()]
    for publish in published:
        publish()
    for run_id, items in by_run.items():
        taint = next((outcome.taint for outcome, _ in items if outcome.taint), "")
        if taint:
            taint_run(run_id, reason=taint)
    return [row for _, row in rows]


def taint_run(run_id: Any, *, reason: str, **data: Any) -> bool:
    """Marks a run tainted, with its `run.tainted` event, unless it already is. Says whether it was marked."""
    if not Run.objects.filter(id=run_id, tainted=False).update(tainted=True, updated_at=timezone.now()):
        return False
    append_event(run_id, "run.tainted", reason=reason, **data)
    return True


# The engine step's writes as statements built once per process and sent in its batch (apps.core.db.pipeline):
# the twins of `ToolCall.objects.bulk_create` and `move_call` above, for the step's hot path.
@functools.cache
def _call_inserts() -> Inserts:
    return Inserts(ToolCall)


def send_new_calls(rows: list[ToolCall]) -> None:
    """Sends the insert of a model call's ledger rows, as they are in memory, into the current batch."""
    _call_inserts().send(rows)


def send_move(row: ToolCall, *, expect: str, fields: dict[str, Any]) -> None:
    """`move_call`'s UPDATE sent into the current batch, without its event: the statement checks its row count
    and raises `NothingUpdated` when the row is no longer in `expect`."""
    values = _move_values(fields)
    update = _call_move(tuple(values))
    send_expected(update.sql, update.params({**values, "updated_at": timezone.now()}, {"id": row.id, "state": expect}))


def send_completion(row: ToolCall, fields: dict[str, Any]) -> None:
    """Sends `dispatched -> fields['state']` into the current batch. A batch shows no row count before its
    COMMIT: the statement checks it and raises `NothingUpdated` when the row is no longer `dispatched`."""
    send_move(row, expect=CallState.DISPATCHED, fields=fields)


# --- the run's claim ------------------------------------------------------------------------------------

# The claim in one statement on Postgres: the compare-and-set, the time spent waiting for people added
# to `waited_s`, and the run's `run.recovered` (taken over from a lost worker), `run.resumed` or
# `run.started` event with its sequence number: one round trip between a decision and the approved
# call's dispatch, where the ORM's UPDATE, lock, `state` update and event INSERT with BEGIN and COMMIT
# would be six.
_CLAIM_SQL = """
WITH old AS (
  SELECT id, status, last_seq, state, COALESCE(state->>'waiting_since', '') <> '' AS resumed
  FROM runs_run WHERE id = %(id)s FOR UPDATE
), claimed AS (
  UPDATE runs_run r SET
    status = 'running', lease_owner = %(owner)s, lease_expires_at = %(expires)s,
    deliveries = CASE WHEN old.status = 'running' THEN r.deliveries + 1 ELSE r.deliveries END,
    started_at = COALESCE(r.started_at, %(now)s), updated_at = %(now)s,
    state = CASE WHEN old.resumed THEN (old.state - 'waiting_since') || jsonb_build_object('waited_s',
        COALESCE((old.state->>'waited_s')::float8, 0) + GREATEST(0::float8,
          EXTRACT(EPOCH FROM (%(now)s::timestamptz - (old.state->>'waiting_since')::timestamptz))::float8))
      ELSE old.state END,
    last_seq = old.last_seq + CASE WHEN old.status = 'running' OR old.resumed OR old.last_seq <= 1 THEN 1 ELSE 0 END
  FROM old
  WHERE r.id = old.id AND (old.status = 'queued' OR (old.status = 'running'
    AND (r.lease_expires_at < %(now)s OR r.lease_owner = %(swept)s)))
  RETURNING {columns}, CASE WHEN old.status = 'running' THEN 'run.recovered' WHEN old.resumed THEN 'run.resumed'
    WHEN old.last_seq <= 1 THEN 'run.started' END AS claim_event
), event AS (
  INSERT INTO runs_runevent (run_id, seq, type, data, at)
  SELECT id, last_seq, claim_event, CASE WHEN claim_event = 'run.resumed' THEN '{}'::jsonb
    ELSE %(started)s::jsonb END, %(now)s
  FROM claimed WHERE claim_event IS NOT NULL
)
SELECT * FROM claimed
"""


@functools.cache
def _claim_sql() -> tuple[Columns, str]:
    """The claim with the run's columns listed once per process (apps/core/rows.py): a raw queryset would
    work out its columns and their model fields again on every claim, between a decision and its call."""
    run = Columns(Run, [f.name for f in Run._meta.concrete_fields], "r")
    return run, _CLAIM_SQL.replace("{columns}", run.sql)


def claim_run(run_id: str, owner: str) -> Run | None:
    """Compare-and-set: queued, or running with an expired lease (a lost worker) or one the sweeper took
    back (`SWEPT`) -> running, ours."""
    now = timezone.now()
    if connections[Run.objects.db].vendor == "postgresql":
        started = {"worker": owner}
        columns, sql = _claim_sql()
        rows = fetch(sql, {"id": columns.param("id", run_id), "owner": owner, "now": now, "swept": SWEPT,
                           "expires": now + timedelta(seconds=lease_seconds()), "started": json.dumps(started)})
        if not rows:
            return None
        run, claim_event = columns.instance(rows[0][:len(columns)]), rows[0][len(columns)]
        if claim_event:
            _publish(run.id, run.last_seq, claim_event, {} if claim_event == "run.resumed" else started, now)
        publish_status(run)
        return run
    expires = now + timedelta(seconds=lease_seconds())
    fields = dict(status=RunStatus.RUNNING, lease_owner=owner, lease_expires_at=expires,
                  started_at=Coalesce(F("started_at"), now), updated_at=now)
    lost = Q(status=RunStatus.RUNNING) & (Q(lease_expires_at__lt=now) | Q(lease_owner=SWEPT))
    recovered = bool(Run.objects.filter(lost, id=run_id).update(**fields, deliveries=F("deliveries") + 1))
    if not recovered and not Run.objects.filter(id=run_id, status=RunStatus.QUEUED).update(**fields):
        return None
    with transaction.atomic():
        run = Run.objects.select_for_update().get(id=run_id)
        state = dict(run.state)
        if recovered:
            append_event(run.id, "run.recovered", worker=owner)
        elif state.get("waiting_since"):
            waited = (now - datetime.fromisoformat(state.pop("waiting_since"))).total_seconds()
            state["waited_s"] = float(state.get("waited_s", 0)) + max(0.0, waited)
            run.state = state
            run.save(update_fields=["state"])
            append_event(run.id, "run.resumed")
        elif run.last_seq <= 1:
            append_event(run.id, "run.started", worker=owner)
        publish_status(run)
    return run


# --- the run's end -----------------------------------------------------------------------------------------

def open_host_run(*, org_id: Any, agent_id: Any, agent_name: str, name: str, started_by_id: Any, started_by: str,
                  inputs: dict[str, Any], gateway: dict[str, Any], client: str,
                  **started: Any) -> tuple[Run, RunStep, RunStep]:
    """A run for an outside MCP host's session (the gateway's): running from the start, one agent turn and one
    host "model" step that its tool calls hang from (the host's own model, never billed here), and its
    `run.started` event with `started` (the key, the client, the protocol). The caller's transaction."""
    now = timezone.now()
    run = Run.objects.create(
        org_id=org_id, crew=None, crew_name=name[:100], status=RunStatus.RUNNING, inputs=inputs,
        snapshot={"gateway": gateway, "agents": {str(agent_id): {"id": str(agent_id), "name": agent_name}},
                  "tools": {}},
        started_by_id=started_by_id, started_by_label=started_by, started_at=now, state={}, cost_usd=Decimal(0))
    turn = RunStep.objects.create(org_id=org_id, run=run, position=1, kind=StepKind.AGENT, agent_id=agent_id,
                                  agent_name=agent_name, task="gateway session", status="running", started_at=now)
    step = RunStep.objects.create(org_id=org_id, run=run, parent=turn, position=2, kind=StepKind.LLM,
                                  agent_id=agent_id, agent_name=agent_name, task="gateway session",
                                  provider="mcp-gateway", model=client[:200], cost_usd=Decimal(0),
                                  price_source="gateway: the host's own model, not billed here",
                                  started_at=now, finished_at=now)
    append_event(run.id, "run.started", client=client, **started)
    return run, turn, step


def close_host_run(run_id: Any, *, org_id: Any, status: str, output: str, reason: str = "") -> None:
    """Ends a host session's run: its turn is done, then `finish_run` (pending approvals expire)."""
    with transaction.atomic():
        RunStep.objects.filter(run_id=run_id, kind=StepKind.AGENT, status="running").update(
            status="done", status_reason=reason[:500], finished_at=timezone.now())
        finish_run(run_id, org_id=org_id, status=status, output=output,
                   error=reason if status != RunStatus.SUCCEEDED else "")


def finish_run(run_id: Any, *, org_id: Any, status: str, output: str = "", error: str = "", error_class: str = "",
               lease_owner: str = "", emit: Emit | None = None) -> Run | None:
    """Ends the run; pending approvals of it expire (nothing will execute them). `error` may quote a provider
    or a server: it is redacted before it reaches the row, the event and the notification. Its writes that did
    not go through are its `attention` (apps/runs/outcome.py), in its `run.finished` event and webhook.
    `lease_owner`: the worker ending it (LeaseLost when another took it over); "" for a person or the gateway.
    Returns the run as ended, None when it had ended already."""
    emit, error = emit or events_now(run_id), redact_outside(error, org_id=org_id)
    with transaction.atomic(savepoint=False):
        pending, run, not_done = _read_to_finish(run_id)
        if run.is_finished:
            return None
        if lease_owner and run.lease_owner != lease_owner:  # another worker took the run over
            raise LeaseLost(str(run_id))
        run.status, run.output, run.error, run.error_class = status, output, error[:4000], error_class
        run.finished_at, run.lease_owner, run.lease_expires_at = timezone.now(), "", None
        run.attention = writes_not_done_from(not_done, tools=run.snapshot.get("tools", {}))
        run.updated_at = run.finished_at
        _run_end_update().save(run)
        for request in pending:
            approvals.expire_request(request=request)
        emit("run.finished", status=status, error=error[:500], error_class=error_class,
             attention=run.attention_summary)
        publish_status(run)
        notify(org_id=run.org_id, event="run.finished",
               payload={"run_id": str(run.id), "crew": run.crew_name, "status": status, "error": error[:500],
                        "error_class": error_class, "output": output[:2000],
                        "cost_usd": None if run.cost_usd is None else str(run.cost_usd),
                        "attention": run.attention, "attention_summary": run.attention_summary})
    return run


RUN_END_FIELDS = ("status", "output", "error", "error_class", "finished_at", "lease_owner", "lease_expires_at",
                  "attention", "updated_at")


def _read_to_finish(run_id: Any) -> tuple[list[ApprovalRequest], Run, list[tuple]]:
    """The run's pending requests and the run, locked in that order (`lock_pending_requests`), and its calls that
    did not go through (apps.runs.outcome): one round trip of statements built once per process. Through the
    ORM, one after the other, they were ~3 ms of every run's end (bench/run.py, whole runs)."""
    requests, pending_sql = _pending_read()
    run, run_sql = _run_lock_read()
    pending, found, not_done = fetch_together([
        (pending_sql, [requests.param("run_id", run_id), ApprovalStatus.PENDING]), (run_sql, [run.param("id", run_id)]),
        not_done_statement(run_id)])
    if not found:
        raise Run.DoesNotExist(f"No run {run_id}.")
    return [requests.instance(row) for row in pending], run.instance(found[0]), not_done


@functools.cache
def _pending_read() -> tuple[Columns, str]:
    requests = Columns(ApprovalRequest, [f.name for f in ApprovalRequest._meta.concrete_fields], "a")
    return requests, (f"SELECT {requests.sql} FROM {requests.table} a "  # noqa: S608
                      f"WHERE a.run_id = %s AND a.status = %s ORDER BY a.id{_for_update()}")


@functools.cache
def _run_lock_read() -> tuple[Columns, str]:
    run = _claim_sql()[0]
    return run, f"SELECT {run.sql} FROM {run.table} r WHERE r.id = %s{_for_update()}"  # noqa: S608


def _for_update() -> str:
    return " FOR UPDATE" if connections[Run.objects.db].features.has_select_for_update else ""  # SQLite: no need


@functools.cache
def _run_end_update() -> Update:
    return Update(Run, RUN_END_FIELDS, ("id",))


def lock_pending_requests(run_id: Any) -> list[ApprovalRequest]:
    """Locks the run's pending approval requests. Whoever locks both a run's requests and the run itself
    locks the requests first (as deciding does), so a decision and a cancel cannot deadlock."""
    requests, sql = _pending_read()
    return [requests.instance(row) for row in fetch(sql, [requests.param("run_id", run_id), ApprovalStatus.PENDING])]
