"""The worker's side of a run: claim it with a lease, advance it a bounded number of engine steps, give it
back; the sweeper that re-enqueues runs whose worker or queue message was lost."""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.core.db import pipeline
from apps.core.rows import Columns, fetch
from apps.runs.engine.errors import LeaseLost
from apps.runs.engine.loop import advance
from apps.runs.lease import SWEPT, LeaseHeartbeat, heartbeat_seconds, lease_seconds
from apps.runs.ledger import _publish as publish_event
from apps.runs.ledger import append_event, publish_status
from apps.runs.models import Run, RunStatus
from apps.runs.queue import enqueue, enqueue_on_commit
from apps.runs.store.notices import ChangeNotices
from apps.runs.store.run_store import RunStore

logger = logging.getLogger(__name__)


def max_deliveries() -> int:
    return int(getattr(settings, "AIRLOCK_RUN_MAX_DELIVERIES", 3))


# --- claim, advance, sweep -----------------------------------------------------------------------

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
                enqueue_on_commit(run_id)
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
        enqueue(run_id)
    return len(ids)


def requeue_after() -> float:
    """How long a queued run may sit untouched before its message counts as lost (a Redis restart)."""
    return float(getattr(settings, "AIRLOCK_RUN_REQUEUE_AFTER_S", 60))
