"""The gateway's writes: sessions as runs, calls in the runs ToolCall ledger, run events, audit.

A gateway session is a `Run` with no crew (`crew_name` "Gateway · <key name>", status
`running`, no lease, so the engine's sweeper never touches it) holding one agent turn and one
`llm`-kind step standing for the outside host (provider `mcp-gateway`, cost 0, no tokens); every
call is a `ToolCall` row on that step, so run history, the trace and the inbox show gateway
calls exactly like the engine's.

Hot path: an allowed read is forwarded first and its ledger row, run event and audit row are
queued to `LedgerWriter`, which has them committed in batches (one transaction every
`FLUSH_INTERVAL_S` or `FLUSH_MAX` calls) by a writer process of its own (`ledger_process`), so
the batch's ORM work never competes with the requests for this process's GIL. A write or
dangerous call commits its `dispatched` row synchronously before it is sent (the ledger's rule),
and only its completion is batched.
Held calls are written synchronously: they create an approval request in the inbox.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections, transaction
from django.db.models import Q
from django.utils import timezone

import apps
from apps.approvals import questions
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from apps.audit import services as audit
from apps.core.db import pipeline
from apps.gateway.ledger_process import ACK, HEADER
from apps.gateway.models import GatewayKey, GatewaySession
from apps.registry.models import Tool
from apps.runs import ledger
from apps.runs.ledger import CallRun, Outcome, events_now, publish_status
from apps.runs.models import CallState, Run, RunStatus, RunStep, StepKind, ToolCall

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.5  # a batch collects for this long after its first record
FLUSH_MAX = 200
SESSION_IDLE = timedelta(minutes=30)
POSITION_WRAP = 30000  # ToolCall.position is a small integer; order within a step is by time anyway
PUBLISH_PER_RUN = 20  # live trace notices per run per batch (pages re-read the rest)
RETRY_FIRST_S = 0.2  # a batch the database cannot take is retried after this, doubling up to RETRY_MAX_S
RETRY_MAX_S = 5.0
STOP_WAIT_S = 30.0  # a stop waits this long for the database, then spools what is left


@dataclass(frozen=True)
class GatewayActor:
    """Who acts for audit rows: the key (never a person)."""

    label: str
    ip: str | None = None
    user_id: int | None = None
    token_id: uuid.UUID | None = None


@dataclass
class SessionRef:
    """An open gateway session as the endpoint keeps it in memory."""

    pk: str
    run_id: str
    turn_id: str
    step_id: str
    org_id: str
    key_id: str
    agent_id: str
    agent_name: str
    bucket: str
    tainted: bool = False
    taint_source: str = ""  # what tainted it ("the result of web.fetch"), for a held call's reason
    calls: int = 0
    last_seen: float = 0.0

    @property
    def run_hex(self) -> str:
        """The run's id as change notices name it (migration gateway/0004)."""
        return self.run_id.replace("-", "")

    def next_position(self) -> int:
        self.calls += 1
        return self.calls % POSITION_WRAP


@dataclass
class CallRecord:
    """One finished (or denied) call, for the writer."""

    org_id: str
    run_id: str
    step_id: str
    session_pk: str
    key_id: str
    actor: GatewayActor
    fields: dict[str, Any]  # ToolCall fields
    row_id: str | None = None  # a `dispatched` row committed before the call: update it
    taint: str = ""  # a reason to mark the run tainted
    event: str = "tool.completed"
    event_data: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))  # the new ToolCall row's id


# --- sessions ------------------------------------------------------------------------------------

def open_session(*, key_id: str, bucket: str, session_id: str, client_name: str,
                 protocol_version: str, ip: str | None) -> SessionRef:
    """Reuses the key's open session for this bucket, or starts one (a Run with its turn and host step)."""
    key = GatewayKey.objects.select_related("agent").get(id=key_id)
    now = timezone.now()
    existing = (GatewaySession.objects.filter(key=key, session_id=session_id, ended_at__isnull=True,
                                              run__status=RunStatus.RUNNING)
                .select_related("run").order_by("-last_seen_at").first())
    if existing is not None and (session_id or existing.last_seen_at >= now - SESSION_IDLE):
        step = (RunStep.objects.filter(run_id=existing.run_id, kind=StepKind.LLM).order_by("-position")
                .values_list("id", "parent_id").first())
        if step is not None:
            calls = ToolCall.objects.filter(run_id=existing.run_id).count()
            return SessionRef(pk=str(existing.id), run_id=str(existing.run_id), turn_id=str(step[1]),
                              step_id=str(step[0]), org_id=str(key.org_id), key_id=str(key.id),
                              agent_id=str(key.agent_id), agent_name=key.agent.name, bucket=bucket,
                              tainted=existing.run.tainted, calls=calls)
    label = f"gateway key {key.name}"
    client = client_name or "MCP client"
    with transaction.atomic():
        run, turn, step = ledger.open_host_run(
            org_id=key.org_id, agent_id=key.agent_id, agent_name=key.agent.name, name=f"Gateway · {key.name}",
            started_by_id=key.created_by_id, started_by=label, client=client,
            inputs={"client": client, "protocol_version": protocol_version, "session": session_id or "stateless"},
            gateway={"key_id": str(key.id), "key_name": key.name, "agent_id": str(key.agent_id),
                     "agent_name": key.agent.name},
            gateway_key=key.name, protocol_version=protocol_version)
        session = GatewaySession.objects.create(org_id=key.org_id, key=key, run=run, session_id=session_id,
                                                client_name=client[:200], protocol_version=protocol_version,
                                                last_seen_at=now)
        audit.record(org_id=key.org_id, actor=GatewayActor(f"gateway:{key.name}", ip), action="gateway.session_started",
                     target=run, target_label=run.crew_name,
                     data={"client": client, "protocol_version": protocol_version, "agent": key.agent.name})
        publish_status(run)
    return SessionRef(pk=str(session.id), run_id=str(run.id), turn_id=str(turn.id), step_id=str(step.id),
                      org_id=str(key.org_id), key_id=str(key.id), agent_id=str(key.agent_id),
                      agent_name=key.agent.name, bucket=bucket)


def end_session(*, session_pk: str, status: str = RunStatus.SUCCEEDED, reason: str = "") -> None:
    """Ends the session's run (pending approvals of it expire, like any finished run)."""
    session = GatewaySession.objects.filter(id=session_pk).first()
    if session is None or session.ended_at is not None:
        return
    calls = ToolCall.objects.filter(run_id=session.run_id).count()
    with transaction.atomic():
        GatewaySession.objects.filter(id=session_pk).update(ended_at=timezone.now())
        ledger.close_host_run(session.run_id, org_id=session.org_id, status=status, reason=reason,
                              output=f"{calls} tool call(s) through the gateway.")


def sessions_to_end(*, idle_before, limit: int = 100) -> list[str]:
    """Open sessions idle since `idle_before` with nothing pending in the inbox."""
    pending = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).values("run_id")
    return [str(pk) for pk in GatewaySession.objects.filter(ended_at__isnull=True, last_seen_at__lt=idle_before)
            .exclude(run_id__in=pending).values_list("id", flat=True)[:limit]]


def cancelled_sessions(session_pks: list[str]) -> list[str]:
    """Of these sessions, those whose run a person cancelled or that ended elsewhere."""
    if not session_pks:
        return []
    over = Q(ended_at__isnull=False) | Q(run__cancel_requested=True) | ~Q(run__status=RunStatus.RUNNING)
    return [str(pk) for pk in GatewaySession.objects.filter(over, id__in=session_pks).values_list("id", flat=True)]


# --- rows ----------------------------------------------------------------------------------------

def call_fields(*, step_id: str, position: int, tool: Any, name_used: str, qualified_name: str,
                arguments: dict[str, Any], args_hash: str) -> dict[str, Any]:
    return {"step_id": step_id, "call_id": f"gw-{uuid.uuid4().hex}", "position": position,
            "tool_id": tool.tool_id if tool else None, "qualified_name": qualified_name[:200],
            "model_tool_name": name_used[:200], "arguments": arguments, "args_hash": args_hash,
            "definition_hash": tool.definition_hash if tool else "",
            "idempotency_key": f"airlock-{uuid.uuid4().hex[:24]}"}


def insert_dispatched(*, org_id: str, run_id: str, fields: dict[str, Any]) -> str:
    """Commits a `dispatched` row before a non-read call leaves (the ledger's rule). Returns its id."""
    now = timezone.now()
    row = ledger.insert_call(org_id=org_id, run_id=run_id, state=CallState.DISPATCHED, decision="allow",
                             decided_at=now, dispatched_at=now, attempts=1, **fields)
    return str(row.id)


def recover_in_flight() -> int:
    """At start: gateway calls left `dispatched` by a process that died become `unknown` (a person checks)."""
    rows = ToolCall.objects.filter(run__gateway_session__isnull=False,
                                   dispatched_at__lt=timezone.now() - timedelta(minutes=5))
    return ledger.calls_lost_in_flight(
        rows, error="The gateway stopped after sending this call and before its result was stored. "
                    "It may or may not have happened: a person must check and resolve it.")


class LedgerWriter:
    """Hands call records to the writer process (`ledger_process`), which commits them in batches.

    `put` only appends to a deque (no lock, no thread wake-up but the first of a batch). A shipper
    thread sleeps `FLUSH_INTERVAL_S` after a batch's first record, sends the batch down a pipe and
    waits for the writer's acknowledgement, while the next batch collects. The SQL, the ORM and
    the audit chain run in the writer process, so a commit never takes the GIL from the requests.

    Nothing is lost on a graceful stop: `stop` sends what is left, waits for every
    acknowledgement, then closes the writer's input (it exits at end of input). A writer that dies
    is restarted and gets the unacknowledged batch again, marked as a resend (records already
    committed are skipped: their ids are chosen here). If no writer process can be started, the
    shipper commits the batch itself, in this process.

    No record is ever dropped: a batch the database cannot take is retried with backoff until it
    is stored (the shipper waits, the next batches collect meanwhile). Each batch is in a spool
    file (`spool_dir()`) from before it is sent until it is acknowledged, and a stop that cannot
    store everything within `STOP_WAIT_S` leaves the rest there; the next gateway to start sends
    spool files of gateways that are gone again, as resends.
    """

    def __init__(self, *, use_process: bool = True) -> None:
        self._records: deque[CallRecord] = deque()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._use_process = use_process
        self._child: subprocess.Popen | None = None
        self._failures = 0  # writer processes in a row that died or would not start
        self._batches = 0

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="gateway-ledger", daemon=True)
            self._thread.start()

    def put(self, record: CallRecord) -> None:
        self._records.append(record)
        if self._idle.is_set():
            self._idle.clear()
        if not self._wake.is_set():
            self._wake.set()

    def stop(self, timeout: float = 30) -> None:
        """Commits everything queued so far (through the writer), then stops the writer."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)
        if self._records:  # the shipper could not finish in time: commit here, or spool, rather than lose them
            left = write_batch(self._drain(len(self._records)), give_up_at=time.monotonic() + STOP_WAIT_S)
            if left:
                spool(left)
        self._close_child(timeout=5)  # a batch the writer is still retrying stays in its spool file

    @property
    def idle(self) -> bool:
        """Everything queued so far is committed (or given up)."""
        return self._idle.is_set() and not self._records

    def wait_idle(self, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while not self.idle:
            if time.monotonic() >= deadline:
                return False
            self._idle.wait(0.05)
        return True

    # --- the shipper thread ----------------------------------------------------------------------

    def _drain(self, limit: int) -> list[CallRecord]:
        batch = []
        while self._records and len(batch) < limit:
            batch.append(self._records.popleft())
        return batch

    def _run(self) -> None:
        if self._use_process:
            self._spawn()  # Django's start-up in the writer overlaps with the first batch's collection
        self._replay_spool()
        while True:
            if not self._wake.wait(timeout=5):
                if self._child is None:
                    close_old_connections()  # the in-process fallback's connection
                continue
            # Collect for a fixed time after the first record, asleep (not "until a short lull":
            # at tens of calls per second that closed batches of two, and a commit's fixed cost is
            # most of a flush). A backlog or a stop is sent without sleeping.
            if not self._stopping and len(self._records) < FLUSH_MAX:
                time.sleep(FLUSH_INTERVAL_S)
            self._wake.clear()
            while self._records:
                self._ship(self._drain(FLUSH_MAX))
            if not self._records:
                self._idle.set()
            if self._stopping and not self._records:
                return

    def _replay_spool(self) -> None:
        for path in spooled():
            try:
                batch = pickle.loads(path.read_bytes())  # noqa: S301 (written by a gateway of this installation)
            except (OSError, EOFError, pickle.UnpicklingError):
                logger.exception("gateway ledger: cannot read the spool file %s; left in place", path)
                continue
            logger.warning("gateway ledger: storing %s call records a stopped gateway left in %s", len(batch), path)
            self._ship(batch, resend=True)
            path.unlink(missing_ok=True)

    def _ship(self, batch: list[CallRecord], *, resend: bool = False) -> None:
        body = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)  # once: the spool file and the pipe
        kept = spool(batch, body=body)
        if self._send(batch, body, resend=resend):
            kept.unlink(missing_ok=True)

    def _send(self, batch: list[CallRecord], body: bytes, *, resend: bool) -> bool:
        """True once the batch is stored; False when a stop cut it short (it stays in its spool file)."""
        self._batches += 1
        while self._use_process and self._failures < 3:
            child = self._child if self._child is not None and self._child.poll() is None else self._spawn()
            if child is None:
                break
            try:
                child.stdin.write(HEADER.pack(self._batches, resend, len(body)))
                child.stdin.write(body)
                child.stdin.flush()
                ack = child.stdout.read(ACK.size)
            except (BrokenPipeError, OSError, ValueError):
                ack = b""
            if len(ack) == ACK.size and ACK.unpack(ack)[0] == self._batches:
                self._failures = 0
                return True
            if self._stopping:
                return False  # the stop ended a writer still waiting for the database
            logger.error("gateway ledger: the writer process stopped (exit %s); restarting it and sending "
                         "its last batch again", child.poll())
            self._kill_child()
            self._failures += 1
            resend = True
        self._flush_with_retry(batch, resend=resend)
        return True

    def _spawn(self) -> subprocess.Popen | None:
        self._kill_child()
        try:
            # One thread, one connection: no pool (a pool's wait for a connection hid an outage from
            # the retries for its whole timeout).
            self._child = subprocess.Popen([sys.executable, "-m", "apps.gateway.ledger_process"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_project_root(),
                                           env={**os.environ, "AIRLOCK_DB_POOL": "0"})
        except OSError:
            logger.exception("gateway ledger: cannot start the writer process; committing in this process")
            self._failures += 1
            self._child = None
        return self._child

    def _close_child(self, timeout: float) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError, ValueError):
            child.stdin.close()  # end of input: the writer exits
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def _kill_child(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()

    def _flush_with_retry(self, batch: list[CallRecord], *, resend: bool = False) -> None:
        write_batch(batch, resend=resend)  # retries until stored: it never gives up here


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(apps.__file__)))


def write_batch(batch: list[CallRecord], *, resend: bool = False, give_up_at: float | None = None) -> list[CallRecord]:
    """Commits one batch, retrying with backoff while the database does not answer, for as long as
    it takes (or until `give_up_at`, a monotonic time, at a stop). Returns the records not stored
    (empty unless it gave up): the caller keeps them (`spool`). A record the database refuses for
    itself (not a lost connection) is set aside in the dead-letter file, never dropped.

    `resend`: the batch may have been committed already (by a writer that died before its
    acknowledgement, or an attempt whose commit's answer was lost); what is stored is skipped."""
    delay, attempt = RETRY_FIRST_S, 0
    while batch:
        attempt += 1
        try:
            if resend or attempt > 1:
                batch = unwritten(batch)
            flush(batch)
            return []
        except (OperationalError, InterfaceError) as exc:  # the database is away: wait for it
            (logger.exception if attempt <= 3 else logger.warning)(
                "gateway ledger: %s calls not stored yet (attempt %s: %s); retrying in %.1f s",
                len(batch), attempt, type(exc).__name__, delay)
        except Exception:
            logger.exception("gateway ledger: a batch of %s calls was refused; storing its calls one by one",
                             len(batch))
            close_connections()
            return _write_one_by_one(batch, give_up_at=give_up_at)
        close_connections()
        if give_up_at is not None and time.monotonic() + delay > give_up_at:
            logger.error("gateway ledger: stopping with %s calls not stored; kept in the spool", len(batch))
            return batch
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
    return []


def _write_one_by_one(batch: list[CallRecord], *, give_up_at: float | None) -> list[CallRecord]:
    left: list[CallRecord] = []
    for record in batch:
        try:
            flush(unwritten([record]))
        except (OperationalError, InterfaceError):
            close_connections()
            left += write_batch([record], resend=True, give_up_at=give_up_at)
        except Exception:
            close_connections()
            logger.exception("gateway ledger: call record %s refused; kept in the dead-letter spool", record.id)
            spool([record], dead=True)
    return left


# --- the spool: batches kept on disk until they are stored ------------------------------------------

def spool_dir() -> Path:
    return Path(settings.VAR_DIR) / "gateway-ledger"


def spool(batch: list[CallRecord], *, dead: bool = False, body: bytes | None = None) -> Path:
    """Writes records to a spool file (replayed by the next gateway to start; `dead`: for a person). `body`: the
    batch already pickled."""
    folder = spool_dir() / ("dead" if dead else "pending")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{os.getpid()}-{uuid.uuid4().hex}.batch"
    partial = path.with_suffix(".partial")
    partial.write_bytes(body if body is not None else pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(partial, path)
    return path


def spooled() -> list[Path]:
    """Pending spool files left by gateway processes that are gone."""
    folder = spool_dir() / "pending"
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("*.batch") if not _alive(int(p.name.split("-", 1)[0]))),
                  key=lambda p: p.stat().st_mtime)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process's own files are from an earlier life (or handed to it)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unwritten(batch: list[CallRecord]) -> list[CallRecord]:
    """The records of a batch that are not stored yet."""
    new = [r.id for r in batch if not r.row_id]
    done = {str(pk) for pk in ToolCall.objects.filter(id__in=new).values_list("id", flat=True)} if new else set()
    updated = [r.row_id for r in batch if r.row_id]
    if updated:
        done |= {str(pk) for pk in ToolCall.objects.filter(id__in=updated).exclude(state=CallState.DISPATCHED)
                 .values_list("id", flat=True)}
    return [r for r in batch if str(r.row_id or r.id) not in done]


def close_connections() -> None:
    connections.close_all()


def flush(batch: list[CallRecord]) -> None:
    """One transaction: the calls through the run ledger (rows, run events and counters, taint), audit rows,
    session and key last use."""
    if not batch:
        return
    now = timezone.now()
    with transaction.atomic():
        rows = ledger.record_calls(
            [Outcome(id=r.id, org_id=r.org_id, run_id=r.run_id, fields=r.fields, row_id=r.row_id, event=r.event,
                     event_data=r.event_data, taint=r.taint) for r in batch], publish_per_run=PUBLISH_PER_RUN)
        by_org: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record, row in zip(batch, rows, strict=True):
            by_org[record.org_id].append({
                "actor": record.actor, "action": "gateway.tool_call", "target": row,
                "target_label": record.fields.get("qualified_name", "")[:200],
                "data": {"state": record.fields.get("state"), "decision": record.fields.get("decision"),
                         "rule": record.fields.get("rule", ""), "args_hash": record.fields.get("args_hash"),
                         "run_id": record.run_id, **record.event_data}})
        # Two round trips: the last uses with the chain head's lock (read), then the audit rows with the COMMIT.
        with pipeline(commit=True):
            # The key before the audit chain's head, the order a revoke takes them in (else the two deadlock).
            GatewaySession.objects.filter(id__in={r.session_pk for r in batch}).update(last_seen_at=now)
            GatewayKey.objects.filter(id__in={r.key_id for r in batch}).exclude(
                last_used_at__gt=now - timedelta(minutes=1)).update(last_used_at=now)
            for org_id, entries in by_org.items():
                audit.record_many(org_id=org_id, entries=entries)


# --- held calls ----------------------------------------------------------------------------------

def bound_call(*, key_id: str, qualified_name: str, args_hash: str) -> ToolCall | None:
    """The key's earlier held (or approved, not yet sent) call with the same tool and arguments."""
    return (ToolCall.objects.filter(run__gateway_session__key_id=key_id, qualified_name=qualified_name,
                                    args_hash=args_hash, state__in=[CallState.HELD, CallState.APPROVED])
            .select_related("approval").order_by("-created_at").first())


def open_hold(*, session: SessionRef, fields: dict[str, Any], tool: Any, rule: str, reason: str,
              actor: GatewayActor) -> ToolCall:
    """`proposed -> held` with an approval request in the inbox (one transaction), audited."""
    with transaction.atomic():
        row = ledger.insert_call(org_id=session.org_id, run_id=session.run_id, state=CallState.PROPOSED, count=True,
                                 **fields)
        run = Run.objects.get(id=session.run_id)
        turn = RunStep.objects.get(id=session.turn_id)
        ledger.hold_call(run, row, emit=events_now(run.id), rule=rule, reason=reason,
                         tool=tool.snapshot() if tool else None, turn=turn)
        audit.record(org_id=session.org_id, actor=actor, action="gateway.tool_call", target=row,
                     target_label=row.qualified_name,
                     data={"state": "held", "decision": "hold", "rule": rule, "args_hash": row.args_hash,
                           "run_id": session.run_id, "approval_id": str(row.approval_id)})
    return ToolCall.objects.select_related("approval").get(id=row.id)


def follow(row_id: str) -> ToolCall:
    """A held row whose approval was decided moves on (approved with the approved arguments, or rejected)."""
    row = ToolCall.objects.select_related("approval").get(id=row_id)
    if row.state == CallState.HELD and row.approval is not None and row.approval.status != ApprovalStatus.PENDING:
        with transaction.atomic():
            ledger.follow_approval(_call_run(row), row, row.approval, emit=events_now(row.run_id))
        row = ToolCall.objects.select_related("approval").get(id=row_id)
    return row


def claim_approved(row_id: str) -> bool:
    """approved -> dispatched, once (a second waiter on the same call gets False)."""
    row = ToolCall.objects.get(id=row_id)
    with transaction.atomic():
        return ledger.move_call(_call_run(row), row, expect=CallState.APPROVED, emit=events_now(row.run_id),
                                state=CallState.DISPATCHED, dispatched_at=timezone.now(), attempts=row.attempts + 1,
                                event="tool.dispatched", event_data={"via": "gateway"})


def deny_at_dispatch(row_id: str, reason: str, rule: str) -> None:
    row = ToolCall.objects.get(id=row_id)
    with transaction.atomic():
        ledger.move_call(_call_run(row), row, expect=CallState.APPROVED, emit=events_now(row.run_id),
                         state=CallState.DENIED, decision="deny", rule=rule, reason=f"Refused at dispatch: {reason}",
                         error_class="permission", event="tool.decided",
                         event_data={"decision": "deny", "state": "denied", "reason": reason, "at": "dispatch"})


def complete_held(row_id: str, *, state: str, result: dict[str, Any] | None, error: str, error_class: str,
                  findings: list[dict[str, Any]], actor: GatewayActor) -> None:
    row = ToolCall.objects.get(id=row_id)
    with transaction.atomic():
        ledger.complete_call(_call_run(row), row, emit=events_now(row.run_id), state=state, result=result,
                             error=error, error_class=error_class, findings=findings)
        audit.record(org_id=row.org_id, actor=actor, action="gateway.tool_call", target=row,
                     target_label=row.qualified_name,
                     data={"state": state, "decision": "allow", "rule": "approved", "args_hash": row.args_hash,
                           "run_id": str(row.run_id), "approval_id": str(row.approval_id)})


def _call_run(row: ToolCall) -> CallRun:
    """What the ledger needs of a gateway call's run (its org; a gateway run has no crew)."""
    return CallRun(id=row.run_id, org_id=row.org_id,
                   crew_name=Run.objects.filter(id=row.run_id).values_list("crew_name", flat=True).first() or "")


def row_state(row_id: str) -> ToolCall:
    return ToolCall.objects.select_related("approval").get(id=row_id)


def live_tool_facts(*, org_id: str, qualified_name: str):
    """The registry's current row for a tool (state, risk, pin), for the check at dispatch."""
    return Tool.objects.filter(org_id=org_id, qualified_name=qualified_name).select_related("server").first()


# --- what a server asks of the host during a call (apps/gateway/relay.py) ---------------------------

def record_relay(run_id: str, type: str, **data: Any) -> None:
    """A server's request during a call, relayed to the host or refused, as an event of the gateway session's
    run (the run trace shows it under its call: `tool_call_id`)."""
    with transaction.atomic():
        ledger.append_event(run_id, type, **data)


def open_sampling_hold(*, org_id: str, run_id: str, agent_id: str, tool_call_id: str, tool_id: str | None,
                       tool: str, server: str, host: str, prompt: dict[str, Any], expires_at: Any) -> str:
    """A sampling request held for a person (the server's `hold_sampling` setting): an inbox item and the
    run's `sampling.requested` event, in one transaction. Returns the item's id."""
    run = Run.objects.only("id", "crew_name", "started_by_id").get(id=run_id)
    worker = f"gateway {os.uname().nodename}:{os.getpid()}"
    with transaction.atomic():
        request = questions.open_item(
            org_id=org_id, kind=ApprovalKind.SAMPLING, run_id=run_id, tool_call_id=tool_call_id, agent_id=agent_id,
            tool_id=tool_id, title=f"{server} asks to run the model of {host}",
            reason=f"{server} (called through the gateway by {host}) asks the host to run its model; the "
                   "server's setting holds that for a person.",
            context={"prompt": prompt, "ask": "approvers", "server": server, "tool": tool, "agent": host,
                     "crew": run.crew_name, "worker": worker, "call_expires_at": expires_at.isoformat()},
            expires_at=expires_at, requested_by_user_id=run.started_by_id, arguments={"prompt": prompt})
        ledger.append_event(run_id, "sampling.requested", approval_id=str(request.id), tool_call_id=tool_call_id,
                            server=server, tool=tool, expires_at=expires_at.isoformat(), worker=worker)
    return str(request.id)


def sampling_hold_status(approval_id: str, *, expire: bool = False) -> tuple[str, str]:
    """(status, who decided) of a held sampling request; `expire`: a still-pending one expires now (the call's
    deadline came first), with the run's `sampling.expired` event."""
    with transaction.atomic():
        request = ApprovalRequest.objects.select_for_update().get(id=approval_id)
        if expire and request.status == ApprovalStatus.PENDING:
            approvals.expire_request(request=request)
            ledger.append_event(request.run_id, "sampling.expired", approval_id=approval_id,
                                tool_call_id=str(request.tool_call_id), reason="The call's timeout came first.")
    return request.status, request.decided_by_label or ""
