"""A run's lease while a task drives it: short, and renewed by a heartbeat thread as long as the process lives.

A worker that dies (SIGKILL, OOM, a lost machine) stops renewing, so its lease runs out within
`AIRLOCK_RUN_LEASE_S` and beat's sweeper (every `AIRLOCK_RUN_SWEEP_S`) hands the run to another worker:
a takeover in seconds, not minutes. A long model or tool call keeps the lease, since the heartbeat is
a thread of its own; a driver that makes no progress for `AIRLOCK_RUN_STUCK_S` (a hung call past every
timeout, a deadlock) is given up on: the heartbeat stops renewing and the run is taken over as if the
worker had died. Exactly once stays the ledger's job: every transition is conditional, so a worker that
lost its lease finds its next write refused (LeaseLost) and a call it had in flight is `unknown` to the
worker that took over (a read is simply made again).

The heartbeat writes only `lease_expires_at` of a row whose `lease_owner` is still this task's, on a
connection of its own (Django's connections are per thread); the driver reads what it learnt (`lost`,
`deadline`) without a round trip.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connections
from django.utils import timezone

from apps.runs.models import Run, RunStatus

logger = logging.getLogger(__name__)

# The owner of a lease beat's sweeper took back from a lost worker: any worker may claim the run now.
SWEPT = "swept"


def lease_seconds() -> float:
    """How long a lease lasts without renewal: the longest a dead worker's run waits to be taken over
    (plus one sweep)."""
    return float(getattr(settings, "AIRLOCK_RUN_LEASE_S", 6))


def heartbeat_seconds() -> float:
    """How often the heartbeat renews (0: no heartbeat; the driver renews at step boundaries itself); at
    least three times per lease, so one late beat on a busy machine does not lose it."""
    every = float(getattr(settings, "AIRLOCK_RUN_HEARTBEAT_S", 2))
    return min(every, lease_seconds() / 3) if every > 0 else 0.0


def stuck_seconds() -> float:
    """How long a driver may go without progress (a step, a call sent) before its lease is let go."""
    return float(getattr(settings, "AIRLOCK_RUN_STUCK_S", 900))


def renew(run_id: str, owner: str) -> bool:
    """Extends the lease by `lease_seconds()` while `owner` holds it on a running run. False when it does not."""
    expires = timezone.now() + timedelta(seconds=lease_seconds())
    return bool(Run.objects.filter(id=run_id, status=RunStatus.RUNNING, lease_owner=owner)
                .update(lease_expires_at=expires))


class LeaseHeartbeat:
    """Renews one task's lease every `heartbeat_seconds()` from a daemon thread, from `start()` to `stop()`.

    `touch()` is the driver saying it made progress; `lost` turns True once a renewal finds the lease no
    longer this task's (the sweeper or another worker took the run, or the run left `running`);
    `deadline` (monotonic) is when the lease last renewed runs out."""

    def __init__(self, run_id: str, owner: str, *, claimed_at: float) -> None:
        self.run_id, self.owner = run_id, owner
        self.every, self.lease, self.stuck = heartbeat_seconds(), lease_seconds(), stuck_seconds()
        self.deadline = claimed_at + self.lease
        self.lost = False
        self._touched = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id[:8]}", daemon=True)

    def start(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.lease)

    def touch(self) -> None:
        self._touched = time.monotonic()

    def renewed(self, at: float) -> None:
        """The driver renewed the lease itself (at monotonic `at`)."""
        self.deadline = max(self.deadline, at + self.lease)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.every) and not self.lost:
                if time.monotonic() - self._touched > self.stuck:
                    logger.error("run %s: no progress for %.0f s; letting its lease run out so another worker "
                                 "takes it over", self.run_id, self.stuck)
                    return
                self._renew_once()
        finally:
            connections.close_all()  # this thread's own connection

    def _renew_once(self) -> None:
        started = time.monotonic()
        try:
            held = renew(self.run_id, self.owner)
        except DatabaseError:  # the database is away: the driver will find out too; try again next beat
            logger.warning("run %s: lease renewal failed", self.run_id, exc_info=True)
            connections.close_all()
            return
        if held:
            self.renewed(started)
        else:
            self.lost = True
