"""What changed under a run while a worker drives it, heard from Postgres rather than read at every step.

A step must know of two things that another process may change meanwhile: the run row at its start (a
cancel, the lease taken over) and the tool's registry row before the policy's check at dispatch (a tool
quarantined, a server disabled). Reading them is a round trip to Postgres each, which costs more than the
statement. Instead, while a task drives a run, its connection
LISTENs on the run's channel and on the registry's (the triggers of migrations runs/0006-0007 notify them
on commit; a registry notice names its org), and a check drains what has arrived: a poll of the socket, no
round trip. The LISTEN goes out with the claim (`apps.runs.worker.advance_run`), so the claimed row is
current and nothing committed after it goes unheard: a change to the run waits for the claim's row lock,
and so commits, and is notified, after the claim. When nothing has arrived, what the store read last is
still current, up to the time a notice takes to arrive (well under a millisecond here): the same window
as the one between a read and the commit it guarded.

Not listening (SQLite, `AIRLOCK_CHANGE_NOTICES=0` behind a pooler in transaction mode, where a LISTEN
would stay on a server connection other clients get next, a connection Django replaced mid-task, a
caller's transaction around the engine, in which notices are not delivered and the caller's own changes
are not notified): every check answers "changed", and the store reads as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections

from apps.core.db import connected

logger = logging.getLogger(__name__)


REGISTRY_CHANNEL = "airlock_registry"  # the payload: the changed row's org id, without dashes


def _hex(uuid: Any) -> str:
    """A UUID as the triggers write it (`replace(id::text, '-', '')`)."""
    return str(uuid).replace("-", "")


def run_channel(run_id: Any) -> str:
    return f"airlock_run_{_hex(run_id)}"


@dataclass(frozen=True)
class Changes:
    run: bool
    registry: bool


EVERYTHING = Changes(run=True, registry=True)


class ChangeNotices:
    """The run's and its org's change notices on the store's connection, from `listen()` to `close()`.
    `org_id`: the run's org, when known (the claim tells); until then every registry notice counts."""

    def __init__(self, run_id: Any, org_id: Any = None, using: str = "default") -> None:
        self.channels = (run_channel(run_id), REGISTRY_CHANNEL)
        self.org_id = org_id
        self.using = using
        self._raw: Any = None  # the psycopg connection that listens; None when not listening

    def listen(self) -> bool:
        """Starts listening (in a `pipeline`, with the next statement's round trip). False where notices
        cannot be heard: the store reads instead. What committed before the LISTEN is not notified: read
        after it (or, as the claim does, lock the row it guards in the same transaction)."""
        connection = connections[self.using]
        if (connection.vendor != "postgresql" or connection.in_atomic_block
                or not getattr(settings, "AIRLOCK_CHANGE_NOTICES", True)):  # off behind a transaction pooler
            return False
        raw = connected(self.using).connection
        with connection.wrap_database_errors:
            for channel in self.channels:  # one statement each: a pipeline takes no batch of several
                raw.execute(f'LISTEN "{channel}"', prepare=False)
        self._raw, self._own_pid = raw, raw.info.backend_pid
        return True

    def changes(self) -> Changes:
        """What was notified since the last call (EVERYTHING when not listening). Notices of this connection's
        own changes are skipped: the store knows what it wrote."""
        connection = connections[self.using]
        raw = self._raw
        if raw is None or connection.connection is not raw or connection.in_atomic_block:
            return EVERYTHING
        run = registry = False
        with connection.wrap_database_errors:
            for notice in self._drain(raw):
                if notice.pid == self._own_pid:
                    continue
                run |= notice.channel == self.channels[0]
                registry |= notice.channel == REGISTRY_CHANNEL and (
                    self.org_id is None or notice.payload == _hex(self.org_id))
        return Changes(run=run, registry=registry)

    @staticmethod
    def _drain(raw: Any) -> list[Any]:
        """Every notice received so far. psycopg's `notifies(timeout=0)` returns the ones it kept from earlier
        queries without polling the socket when it has any, so it is asked until an answer comes back empty:
        that one has polled the socket."""
        notices = []
        while batch := list(raw.notifies(timeout=0)):
            notices += batch
        return notices

    def close(self) -> None:
        """Stops listening, so an idle pooled connection holds no channel (Postgres keeps every notice queued
        until each listener has read it)."""
        raw, self._raw = self._raw, None
        connection = connections[self.using]
        if raw is None or connection.connection is not raw or raw.closed or connection.in_atomic_block:
            return
        try:
            raw.execute("; ".join(f'UNLISTEN "{channel}"' for channel in self.channels), prepare=False)
            self._drain(raw)  # what arrived meanwhile: nobody will ask for it
        except Exception:  # the connection broke: its channels went with it
            logger.debug("UNLISTEN failed; the connection is gone or going", exc_info=True)
