"""Writes for runs: start, cancel, decide-and-resume, resolve an unknown call, claim and advance, sweep.

Runs own "decide and resume": `decide_approval` records the person's vote through the
approvals services and, when nothing else is pending, queues the run and enqueues
`resume_run` on commit. Tasks call `advance_run`, which claims the run with a conditional
UPDATE and a lease, runs a bounded number of engine steps, and gives the run back.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import jsonschema
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connections, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.agents.prompts import compose_supervisor_prompt
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from apps.audit import services as audit
from apps.core.db import pipeline
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.rows import Columns, fetch
from apps.costs import selectors as budgets
from apps.crews import selectors as crews
from apps.registry.definitions import reaches_open_world
from apps.registry.models import Tool
from apps.runs import ledger
from apps.runs.engine.errors import LeaseLost
from apps.runs.engine.hashing import args_hash
from apps.runs.engine.loop import advance
from apps.runs.lease import SWEPT, LeaseHeartbeat, heartbeat_seconds, lease_seconds
from apps.runs.ledger import _publish as publish_event
from apps.runs.ledger import append_event, lock_pending_requests, publish_status
from apps.runs.models import CallState, Run, RunStatus, ToolCall
from apps.runs.outcome import writes_not_done
from apps.runs.store.notices import ChangeNotices
from apps.runs.store.run_store import RunStore

logger = logging.getLogger(__name__)


def max_deliveries() -> int:
    return int(getattr(settings, "AIRLOCK_RUN_MAX_DELIVERIES", 3))


# --- start ---------------------------------------------------------------------------------------

def clean_inputs(declared: list[dict[str, Any]], given: dict[str, Any] | None) -> dict[str, Any]:
    """Checks and converts run inputs against the crew's declared inputs. Field errors as `inputs.<name>`."""
    given, errors, out = dict(given or {}), {}, {}
    for spec in declared or []:
        name, kind = spec["name"], spec.get("type", "string")
        value = given.pop(name, None)
        if value is None or value == "":
            if spec.get("required", True):
                errors[f"inputs.{name}"] = "Required."
            continue
        try:
            out[name] = _convert(value, kind)
        except (TypeError, ValueError):
            errors[f"inputs.{name}"] = {"integer": "A whole number.", "number": "A number.",
                                        "boolean": "true or false."}.get(kind, "Text.")
    for name in given:
        errors[f"inputs.{name}"] = "This crew does not declare this input."
    if errors:
        raise ValidationFailed("Some inputs are missing or invalid.", errors)
    return out


def _convert(value: Any, kind: str) -> Any:
    if kind == "integer":
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(str(value).strip()) if not isinstance(value, int | float) else int(value)
    if kind == "number":
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError
    if not isinstance(value, str | int | float):
        raise TypeError
    return str(value)


def build_snapshot(crew: Any) -> dict[str, Any]:
    """The crew, its agents (prompt, grants), the tool definitions they may use, and the versions."""
    members = crews.crew_agents(crew)
    agent_snaps, tools = {}, {}
    for member in members:
        agent = agents.get_agent(org_id=crew.org_id, agent_id=member.id)
        snap = {**agents.agent_snapshot(agent), "id": str(agent.id), "version": agent.version,
                "system_prompt": agents.system_prompt(agent)}
        if crew.supervisor_id == agent.id:
            snap["system_prompt"] = compose_supervisor_prompt(
                base_prompt=snap["system_prompt"], members=[(m.agent.name, m.agent.role) for m in crew.members.all()])
        agent_snaps[str(agent.id)] = snap
        for grant in agent.grants.all():
            tools[grant.tool.qualified_name] = tool_snapshot(grant.tool)
    crew_snap = {**crews.crew_snapshot(crew), "id": str(crew.id), "version": crew.version}
    return {"crew": crew_snap, "agents": agent_snaps, "tools": tools,
            "versions": {"crew": crew.version, "agents": {k: v["version"] for k, v in agent_snaps.items()}}}


def tool_snapshot(tool: Tool) -> dict[str, Any]:
    return {"id": str(tool.id), "server_id": str(tool.server_id), "server": tool.server.name, "name": tool.name,
            "qualified_name": tool.qualified_name, "description": tool.description, "input_schema": tool.input_schema,
            "risk": tool.risk, "state": tool.state, "pinned": tool.is_pinned, "trust_tier": tool.server.trust_tier,
            "definition_hash": tool.definition_hash,
            "open_world": reaches_open_world(tier=tool.server.trust_tier, annotations=tool.annotations),
            "trusted_output": tool.trusted_output or tool.server.trusted_output}


def start_run(*, actor: Actor, crew_id: UUID | str, inputs: dict[str, Any] | None = None,
              idempotency_key: str | None = None, enqueue: bool = True) -> Run:
    """Validates inputs, snapshots the crew, writes a queued Run and enqueues `execute_run` on commit.

    The same `idempotency_key` returns the run it first created. Raises ValidationFailed (inputs,
    a disabled crew or agent), NotFound, PermissionDenied.
    """
    actor.require("runs.start")
    key = (idempotency_key or "").strip()[:200]
    if key:
        existing = Run.objects.filter(org_id=actor.org_id, idempotency_key=key).first()
        if existing is not None:
            return _same_request(existing, crew_id)
    crew = crews.get_crew(org_id=actor.org_id, crew_id=crew_id)
    if not crew.enabled:
        raise ValidationFailed(f"The crew {crew.name!r} is disabled.", {"crew": "This crew is disabled."})
    disabled = crews.disabled_agents(crew)
    if disabled:
        raise ValidationFailed(f"This crew uses disabled agents: {', '.join(disabled)}. Enable them first.",
                               {"crew": f"Disabled agents: {', '.join(disabled)}."})
    clean = clean_inputs(crew.inputs, inputs)
    snapshot = build_snapshot(crew)
    refusal = budgets.start_refusal(org_id=actor.org_id, crew_id=crew.id, agent_ids=list(snapshot["agents"]))
    if refusal:
        raise ValidationFailed(refusal, {"crew": refusal})
    try:
        with transaction.atomic():
            run = Run.objects.create(org_id=actor.org_id, crew=crew, crew_name=crew.name, inputs=clean,
                                     snapshot=snapshot, started_by_id=actor.user_id, started_by_label=actor.label,
                                     idempotency_key=key, state={"task_index": 0, "outputs": {}})
            append_event(run.id, "run.queued", crew=crew.name, inputs=clean, by=actor.label)
            audit.record(org_id=actor.org_id, actor=actor, action="run.started", target=run, target_label=crew.name,
                         data={"inputs": clean, "crew_version": crew.version})
            publish_status(run)
            if enqueue:
                _enqueue_on_commit(run.id)
    except IntegrityError:
        existing = Run.objects.filter(org_id=actor.org_id, idempotency_key=key).first()
        if key and existing is not None:
            return _same_request(existing, crew_id)
        raise
    return run


def _same_request(existing: Run, crew_id: UUID | str) -> Run:
    """The run a key started, when it is asked for the same crew again (else the key is misused)."""
    if str(existing.crew_id) != str(crew_id):
        message = "This Idempotency-Key already started a run of another crew; use a new key."
        raise ValidationFailed(message, {"Idempotency-Key": message})
    return existing


def _enqueue_on_commit(run_id: UUID | str, *, resume: bool = False) -> None:
    transaction.on_commit(lambda: _enqueue(run_id, resume=resume))


def _enqueue(run_id: UUID | str, *, resume: bool = False) -> None:
    from apps.runs import tasks

    (tasks.resume_run if resume else tasks.execute_run).delay(str(run_id))


# --- cancel --------------------------------------------------------------------------------------

def cancel_run(*, actor: Actor, run_id: UUID | str) -> Run:
    """Queued or waiting: cancelled now. Running: flagged; the engine stops at its next step boundary."""
    actor.require("runs.start")
    run = _get(actor, run_id)
    if run.is_finished:
        raise Conflict(f"This run already ended ({run.status}).")
    with transaction.atomic():
        lock_pending_requests(run.id)  # requests before the run, as deciding one does
        locked = Run.objects.select_for_update().get(id=run.id)
        Run.objects.filter(id=run.id).update(cancel_requested=True)
        append_event(run.id, "run.cancel_requested", by=actor.label)
        audit.record(org_id=actor.org_id, actor=actor, action="run.cancelled", target=locked,
                     target_label=locked.crew_name)
        if locked.status in (RunStatus.QUEUED, RunStatus.WAITING):
            ledger.finish_run(run.id, org_id=locked.org_id, status=RunStatus.CANCELLED,
                              error=f"Cancelled by {actor.label}.", output=locked.state.get("last_output", ""))
    return Run.objects.get(id=run.id)


def _get(actor: Actor, run_id: UUID | str) -> Run:
    from apps.runs.selectors import get_run

    return get_run(org_id=actor.org_id, run_id=run_id)


# --- decide and resume ---------------------------------------------------------------------------

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
        # The request and its tool in one read (the lock is the request row's only: `of=("self",)`).
        request = (ApprovalRequest.objects.select_for_update(of=("self",)).select_related("tool")
                   .filter(org_id=actor.org_id, id=approval_id).first())
        if request is None:
            raise NotFound("No such approval request.")
        if request.kind == ApprovalKind.DEFINITION_CHANGE:
            return approvals.decide_definition_change(actor=actor, approval_id=approval_id, decision=decision,
                                                      comment=comment)
        if expected_args_hash and expected_args_hash != (request.approved_args_hash or request.args_hash):
            raise Conflict("The arguments changed since you looked (another approver edited them): "
                           "review them again.")
        # Only what this function reads of the run (not its snapshot): its status, under the row lock.
        run = (Run.objects.select_for_update().only("id", "org_id", "status").filter(id=request.run_id).first()
               if request.run_id else None)
        edited = None
        if arguments is not None and decision == "approve" and args_hash(arguments) != request.args_hash:
            _check_arguments(request, arguments)
            edited = arguments
        # The resume is enqueued first among this transaction's after-commit work (registered before the
        # vote's inbox count and notifications): the worker starts while those are still being sent.
        resume: list[UUID] = []
        transaction.on_commit(lambda: resume and _enqueue(resume[0], resume=True))
        request = approvals.record_vote(actor=actor, request=request, decision=decision, comment=comment,
                                        arguments=edited, approved_args_hash=args_hash(edited) if edited else "",
                                        standing_choice=standing)
        if run is None or request.kind != ApprovalKind.TOOL_CALL:
            return request
        if request.status == ApprovalStatus.PENDING:  # M of N: more approvals needed
            append_event(run.id, "approval.voted", approval_id=str(request.id), decision=decision, by=actor.label,
                         votes=request.votes_cast, required=request.required_approvals)
            return request
        append_event(run.id, "approval.decided", approval_id=str(request.id), tool_call_id=str(request.tool_call_id),
                     decision=request.status, by=actor.label, comment=comment[:500], edited=edited is not None)
        if _resume_if_ready(run, enqueue=False):
            resume.append(run.id)
    return request


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
            if run is not None and request.kind == ApprovalKind.TOOL_CALL and not run.is_finished:
                append_event(run.id, "approval.decided", approval_id=str(request.id),
                             tool_call_id=str(request.tool_call_id), decision=request.status, by="expiry")
                _resume_if_ready(run)
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
# Plain SQL: the ORM compiled the two subqueries on every decision, ~2 ms before the commit the resume
# waits for (bench/run.py, approval).
_RESUME_SQL = """
UPDATE runs_run SET status = 'queued', updated_at = %s
WHERE id = %s AND status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM approvals_approvalrequest a WHERE a.run_id = runs_run.id AND a.status = 'pending')
  AND NOT EXISTS (SELECT 1 FROM runs_toolcall t WHERE t.run_id = runs_run.id AND t.state = 'unknown')
"""


def _resume_if_ready(run: Run, *, enqueue: bool = True) -> bool:
    """Caller holds the run row lock. Waiting and nothing pending -> queued, resume enqueued on commit
    (`enqueue=False`: the caller enqueues it). Says whether the run was queued."""
    if run.status != RunStatus.WAITING:
        return False
    now = timezone.now()
    connection = connections[Run.objects.db]
    with connection.cursor() as cursor:
        cursor.execute(_RESUME_SQL, [Run._meta.get_field("updated_at").get_db_prep_value(now, connection),
                                     Run._meta.pk.get_db_prep_value(run.id, connection)])
        queued = cursor.rowcount
    if not queued:
        return False
    run.status, run.updated_at = RunStatus.QUEUED, now
    publish_status(run)
    if enqueue:
        _enqueue_on_commit(run.id, resume=True)
    return True


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
        _resume_if_ready(run)
    return row


# --- claim, advance, sweep -----------------------------------------------------------------------

# The claim in one statement on Postgres: the compare-and-set, the time spent waiting for people added
# to `waited_s`, and the run's `run.recovered` (taken over from a lost worker), `run.resumed` or
# `run.started` event with its sequence number. It replaces an UPDATE, then a transaction with a
# SELECT ... FOR UPDATE, an UPDATE of `state` and the event's INSERT (six round trips with BEGIN and
# COMMIT) between a decision and the approved call's dispatch.
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
    """The claim with the run's columns listed once per process (apps/core/rows.py): a raw queryset
    worked out its columns and their model fields again on every claim, between a decision and its call."""
    run = Columns(Run, [f.name for f in Run._meta.concrete_fields], "r")
    return run, _CLAIM_SQL.replace("{columns}", run.sql)


def _claim(run_id: str, owner: str) -> Run | None:
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
            publish_event(run.id, run.last_seq, claim_event, {} if claim_event == "run.resumed" else started, now)
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


def advance_run(*, run_id: UUID | str, enqueue_next: bool = True) -> str:
    """Claims the run and runs a bounded number of engine steps. A duplicate or stale delivery does nothing.

    While it drives the run a heartbeat thread renews the lease (apps/runs/lease.py).
    Returns "skipped", "continue", "waiting", "finished" or "lost".
    """
    run_id = str(run_id)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    # Another process's changes to the run or its tools are told while this task drives it, not read at every
    # step (apps/runs/store/notices.py). The LISTEN goes out in the claim's round trip.
    notices = ChangeNotices(run_id)
    heartbeat = None
    try:
        claimed_at = time.monotonic()
        with pipeline():
            heard = notices.listen()
            run = _claim(run_id, owner)
        if run is None:
            return "skipped"
        notices.org_id = run.org_id
        store = RunStore(run_id, owner, run=run)
        store.notices = notices if heard else None
        store.heartbeat = heartbeat = _start_heartbeat(run_id, owner, claimed_at)
        return _advance_claimed(store, enqueue_next=enqueue_next)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        notices.close()


def _start_heartbeat(run_id: str, owner: str, claimed_at: float) -> LeaseHeartbeat | None:
    """A heartbeat thread for the lease just claimed, unless the claim is inside a caller's transaction (the
    thread's own connection would not see it; the engine then renews at its step boundaries itself)."""
    if heartbeat_seconds() <= 0 or connections[Run.objects.db].in_atomic_block:
        return None
    return LeaseHeartbeat(run_id, owner, claimed_at=claimed_at).start()


def _advance_claimed(store: RunStore, *, enqueue_next: bool) -> str:
    run, run_id = store.run, store.run_id
    if run.deliveries > max_deliveries():
        store.finish(RunStatus.FAILED, error=f"The worker running this run was lost {run.deliveries} times; "
                                             "giving up instead of trying again.", error_class="internal")
        return "finished"
    try:
        outcome = advance(store)
        if outcome == "continue":
            store.release()
            if enqueue_next:
                _enqueue_on_commit(run_id)
    except LeaseLost:
        logger.warning("run %s: lease lost to another worker", run_id)
        return "lost"
    except (OperationalError, InterfaceError):
        # The database went away mid-step (restart, failover, a dropped connection): nothing can be
        # written now. The run keeps its lease; when it expires beat's sweeper resumes it from the last
        # committed step (a call that was in flight becomes `unknown`), within the redelivery cap.
        logger.exception("run %s: database connection lost; it resumes when its lease expires", run_id)
        return "lost"
    except Exception as exc:
        logger.exception("run %s failed inside the engine", run_id)
        try:
            store.finish(RunStatus.FAILED, error=f"Internal error: {type(exc).__name__}: {exc}",
                         error_class="internal")
        except LeaseLost:  # another worker has the run now: its outcome is theirs to write
            return "lost"
        return "finished"
    return outcome


def drive_run(*, run_id: UUID | str, max_tasks: int = 50) -> Run:
    """Runs the engine inline in this process until the run waits or ends (seed_demo, tests)."""
    for _ in range(max_tasks):
        if advance_run(run_id=run_id, enqueue_next=False) != "continue":
            break
    return Run.objects.get(id=run_id)


def sweep_stuck_runs() -> int:
    """Beat, every `AIRLOCK_RUN_SWEEP_S`: re-enqueues runs whose worker died (lease expired) or whose queue
    message was lost (queued, untouched for `AIRLOCK_RUN_REQUEUE_AFTER_S`).

    An expired lease is taken back first (owner `SWEPT`, for one more lease), in the same conditional
    UPDATE: the run is enqueued once per lease, not at every sweep while the queue is busy, and a worker
    that lost it (alive but stuck) finds its next write refused. A lost message's run is likewise touched
    (`updated_at`), so it is enqueued again once per `AIRLOCK_RUN_REQUEUE_AFTER_S`. The claim counts each recovery in
    `deliveries`; past the cap the run fails with the reason. Returns how many runs were re-enqueued.
    """
    from apps.runs import tasks

    now = timezone.now()
    expired = list(Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
                   .values_list("id", flat=True)[:500])
    taken = [run_id for run_id in expired if Run.objects.filter(
        id=run_id, status=RunStatus.RUNNING, lease_expires_at__lt=now).update(
            lease_owner=SWEPT, lease_expires_at=now + timedelta(seconds=lease_seconds()))]
    lost_before = now - timedelta(seconds=requeue_after())
    stale = list(Run.objects.filter(status=RunStatus.QUEUED, updated_at__lt=lost_before)
                 .values_list("id", flat=True)[:500])
    requeued = [run_id for run_id in stale if Run.objects.filter(  # touched: enqueued again only if lost again
        id=run_id, status=RunStatus.QUEUED, updated_at__lt=lost_before).update(updated_at=now)]
    ids = [*taken, *requeued]
    for run_id in ids:
        tasks.execute_run.delay(str(run_id))
    return len(ids)


def requeue_after() -> float:
    """How long a queued run may sit untouched before its message counts as lost (a Redis restart)."""
    return float(getattr(settings, "AIRLOCK_RUN_REQUEUE_AFTER_S", 60))
