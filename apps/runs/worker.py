"""The worker's side of a run: claim it with a lease, advance it a bounded number of engine steps, give it
back; the sweeper that re-enqueues runs whose worker or queue message was lost."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from apps.core import tracing
from apps.core.db import pipeline
from apps.runs import ledger
from apps.runs.engine.errors import LeaseLost
from apps.runs.engine.loop import STEPS_PER_TASK, advance
from apps.runs.lease import SWEPT, LeaseHeartbeat, heartbeat_seconds, lease_seconds
from apps.runs.models import Run, RunStatus
from apps.runs.queue import enqueue, enqueue_on_commit, messages_waiting, runs_in_line, runs_taken
from apps.runs.selectors import trace_parent
from apps.runs.store.notices import ChangeNotices
from apps.runs.store.run_store import RunStore

logger = logging.getLogger(__name__)


def max_deliveries() -> int:
    return int(getattr(settings, "AIRLOCK_RUN_MAX_DELIVERIES", 3))


# --- claim, advance, sweep -----------------------------------------------------------------------

def advance_run(*, run_id: UUID | str, enqueue_next: bool = True, max_steps: int = STEPS_PER_TASK) -> str:
    """Claims the run and runs at most `max_steps` engine steps (and TASK_SECONDS); when the run has more to do,
    enqueues its next task on `runs` (unless `enqueue_next` is false). A duplicate or stale delivery does nothing.

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
            run = ledger.claim_run(run_id, owner)
        if run is None:
            return "skipped"
        notices.org_id = run.org_id
        store = RunStore(run_id, owner, run=run)
        store.notices = notices if heard else None
        store.heartbeat = heartbeat = _start_heartbeat(run_id, owner, claimed_at)
        with tracing.span("run.advance", parent=trace_parent(run_id), run_id=run_id, deliveries=run.deliveries):
            return _advance_claimed(store, enqueue_next=enqueue_next, max_steps=max_steps)
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


def _advance_claimed(store: RunStore, *, enqueue_next: bool, max_steps: int) -> str:
    run, run_id = store.run, store.run_id
    if run.deliveries > max_deliveries():
        store.finish(RunStatus.FAILED, error=f"The worker running this run was lost {run.deliveries} times; "
                                             "giving up instead of trying again.", error_class="internal")
        return "finished"
    try:
        outcome = advance(store, max_steps=max_steps)
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
    message was lost (queued, untouched for `AIRLOCK_RUN_REQUEUE_AFTER_S`, and no message for it in the broker).

    An expired lease is taken back first (owner `SWEPT`, for one more lease), in the same conditional
    UPDATE: the run is enqueued once per lease, not at every sweep while the queue is busy, and a worker
    that lost it (alive but stuck) finds its next write refused. The claim counts each recovery in
    `deliveries`; past the cap the run fails with the reason. Returns how many runs were re-enqueued.
    """
    now = timezone.now()
    expired = list(Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
                   .values_list("id", flat=True)[:500])
    taken = [run_id for run_id in expired if Run.objects.filter(
        id=run_id, status=RunStatus.RUNNING, lease_expires_at__lt=now).update(
            lease_owner=SWEPT, lease_expires_at=now + timedelta(seconds=lease_seconds()))]
    ids = [*taken, *_take_lost_messages(now)]
    for run_id in ids:
        enqueue(run_id)
    return len(ids)


def _take_lost_messages(now) -> list:
    """Queued runs untouched for `AIRLOCK_RUN_REQUEUE_AFTER_S` whose message the broker no longer holds (a Redis
    restart, an enqueue that failed after its commit), touched so each is enqueued again once per period.

    A queued run is also untouched while its message waits behind a backlog longer than the period (10,000
    runs started at once: bench/scale.py); enqueuing those again doubled the backlog. So the broker is asked
    first, cheaply, how many messages a queued run may be waiting on: those in line on the run queues, and
    those a worker has taken ahead (prefetched) for a run that is still queued. As many as there are queued
    runs, and every run may still have its own, so none is taken for lost now; they are looked at again a
    period later (a lost one is found once the backlog in front of it has drained). Fewer, and some run's
    message is surely gone: the messages are read to find whose. Counting first matters: reading a deep queue
    each second, as runs keep crossing the period, cost more than the backlog's own work. A taken message of a
    running run, the sweep's own and other queues' are no queued run's: counted, they stood in for a lost run's
    message for as long as the workers stayed busy (one lost run, and the sweep's own message hid it forever)."""
    lost_before = now - timedelta(seconds=requeue_after())
    queued = Run.objects.filter(status=RunStatus.QUEUED)
    stale = queued.filter(updated_at__lt=lost_before)
    if not stale.exists():
        return []
    # The taken ones first: a message a worker takes between the two reads is then missed (which costs one read
    # of the broker), never counted twice (which would hide a lost run for a period).
    taken_ahead = queued.filter(id__in=runs_taken()).count()
    if messages_waiting() + taken_ahead >= queued.count():
        stale.update(updated_at=now)
        return []
    in_line = sorted(runs_in_line())
    for start in range(0, len(in_line), 1000):
        stale.filter(id__in=in_line[start:start + 1000]).update(updated_at=now)
    lost = list(stale.values_list("id", flat=True)[:500])
    return [run_id for run_id in lost if Run.objects.filter(  # touched: enqueued again only if lost again
        id=run_id, status=RunStatus.QUEUED, updated_at__lt=lost_before).update(updated_at=now)]


def requeue_after() -> float:
    """How long a queued run may sit untouched before its message counts as lost (a Redis restart)."""
    return float(getattr(settings, "AIRLOCK_RUN_REQUEUE_AFTER_S", 60))
