"""Realtime: group names (one place) and publishing after commit.

An event is small: a name and ids/counters. Consumers turn it into the same partial the page
renders; nothing else travels over the socket. Publishing waits for the transaction to commit,
so a browser never hears about a row it cannot yet read.

Sending is off the caller's path: `publish` hands the message to this process's sender thread
(one event loop, one channel layer) and returns in microseconds, so a worker's step never waits
for Redis (bench/run.py: "publish cost"). Messages that only nudge a reader of the events table
(`run.event`: the consumer reads every event after its last seq) are coalesced per group while
they wait: a burst of 500 events sends a few nudges, and none is needed per event. The layer may still lose a
nudge (Redis's pub/sub keeps nothing for a process that is not listening at that moment, and a restart loses
what is in flight: apps/core/redis_layer.py), so a run page that hears nothing for a while reads the table
itself (apps/web/consumers.py, CATCH_UP_S): a lost nudge delays an event, it never loses one. A group's nudge
goes out at once when its last one left more than `NUDGE_INTERVAL_S` ago, else when that interval is over (the
newest then replaces those that waited): a worker's step commits several events, and each send costs its
process CPU that the step's own threads wait for (~0.1 ms on Redis; bench/run.py "per step"); a person
watching a run cannot tell 15 ms. Other messages are sent each, in order. A live update is best effort: pages re-read on
load.

Most runs have nobody watching. On the Redis layer a nudge to an empty group still costs a PUBLISH (~0.1 ms of
the worker's CPU; channels_redis's sorted-set layer spent ~0.25), and a step may send several, so a run's
nudges first ask whether any process listens to the group (`group_watched`: one PUBSUB NUMSUB, about as dear
as one PUBLISH, its answer kept for `UNWATCHED_RECHECK_S`). An empty group's nudges are held back meanwhile,
and when that time is over the newest held one is tried again: a page that joined meanwhile (it catches up
from the table on connect) hears of anything newer within that time. A page that left may get nudges for that
long.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections import OrderedDict
from typing import Any
from uuid import UUID

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connections, transaction

from apps.core.channel_layer import DatabaseChannelLayer

logger = logging.getLogger(__name__)

CONSUMER_HANDLER = "realtime.event"


def org_group(org_id: UUID | str) -> str:
    """Everything an organisation's open pages may update (inbox badge, dashboard tiles)."""
    return f"org.{org_id}"


def run_group(run_id: UUID | str) -> str:
    """One run's trace page."""
    return f"run.{run_id}"


def user_group(user_id: int | str) -> str:
    """Every open page of one person, in any organisation: told when their access changes."""
    return f"user.{user_id}"


# A person's sign-in or membership changed (signed out, password changed, removed, new role): each of
# their open sockets re-checks its session and membership, and closes or narrows.
ACCESS_CHANGED = "access.changed"


# Events whose message only says "there is more to read" (the reader catches up from a table):
# while waiting to be sent, a newer one replaces an older one for the same group.
COALESCED = frozenset({"run.event"})
NUDGE_INTERVAL_S = 0.015
UNWATCHED_RECHECK_S = 0.25


class _Sender:
    """This process's sender: a daemon thread with its own loop; `submit` never blocks on the layer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: OrderedDict[tuple, dict] = OrderedDict()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._serial = 0
        self._pid = 0
        self._nudged_at: dict[tuple, float] = {}  # (group, event) -> when its last nudge was sent (loop time)
        self._asked: dict[str, tuple[bool, float]] = {}  # group -> (had a member, until when that holds)
        self._held: dict[tuple, dict] = {}  # (group, event) -> the newest nudge held back while it was empty

    def submit(self, group: str, message: dict) -> None:
        with self._lock:
            if message["event"] in COALESCED:
                key = (group, message["event"])
                self._pending.pop(key, None)
            else:
                self._serial += 1
                key = (group, message["event"], self._serial)
            self._pending[key] = message
            # Wake the thread only from idle: until it has set idle (under this lock) it is still draining and
            # will see this message. A wake-up per message cost a step a GIL hand-off each.
            waiting = self._idle.is_set()
            self._idle.clear()
            if self._loop is None or not self._loop.is_running() or self._pid != os.getpid():
                self._start()  # first use, or a forked child (prefork workers) whose parent had started one
                waiting = True
        if waiting:
            self._loop.call_soon_threadsafe(self._wake.set)

    def _start(self) -> None:
        self._pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        started = threading.Event()
        self._loop.call_soon(started.set)
        threading.Thread(target=self._loop.run_until_complete, args=(self._drain(),), name="realtime-sender",
                         daemon=True).start()
        started.wait(5)

    async def _drain(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    idle = not self._pending
                if idle:
                    await self._release_connections()
                    with self._lock:
                        if not self._pending:
                            self._idle.set()
                            break
                    continue
                wait, key, message = self._take()
                if wait > 0:
                    await asyncio.sleep(wait)  # newer nudges for the group replace the waiting one meanwhile
                    continue
                group = key[0]
                try:
                    layer = get_channel_layer()  # looked up each time: settings may change
                    if message["event"] in COALESCED and not await self._watched(layer, key, message):
                        continue
                    await layer.group_send(group, message)
                except Exception:
                    # A lost live update must never fail the write that caused it: pages re-read on load.
                    logger.exception("realtime publish to %s failed", group)

    def _take(self) -> tuple[float, tuple, dict | None]:
        """(0, key, message) for the first pending message, taken off the queue; or (seconds, ...) to wait
        first, when it is a nudge whose group had one less than `NUDGE_INTERVAL_S` ago."""
        now = self._loop.time()
        with self._lock:
            key, message = next(iter(self._pending.items()))
            if message["event"] in COALESCED:
                wait = self._nudged_at.get(key, -NUDGE_INTERVAL_S) + NUDGE_INTERVAL_S - now
                if wait > 0:
                    return wait, key, None
                if len(self._nudged_at) > 1024:  # a long-lived worker sees many runs: forget those past due
                    self._nudged_at = {k: at for k, at in self._nudged_at.items() if now - at < NUDGE_INTERVAL_S}
                self._nudged_at[key] = now
            del self._pending[key]
        return 0.0, key, message

    async def _watched(self, layer: Any, key: tuple, message: dict) -> bool:
        """Whether `key`'s group may have a member (see the module's doc); holds the nudge back when not."""
        if not hasattr(layer, "group_watched"):  # the embedded layer: a send costs a local insert
            return True
        group, now = key[0], self._loop.time()
        watched, until = self._asked.get(group, (True, 0.0))
        if until > now:  # asked less than UNWATCHED_RECHECK_S ago
            if not watched:
                self._held[key] = message
            return watched
        watched = await layer.group_watched(group)
        if len(self._asked) > 1024:  # a long-lived worker sees many runs: forget those past due
            self._asked = {g: asked for g, asked in self._asked.items() if asked[1] > now}
        self._asked[group] = (watched, now + UNWATCHED_RECHECK_S)
        if not watched:
            self._loop.call_later(UNWATCHED_RECHECK_S, self._recheck, key)
        return watched

    def _recheck(self, key: tuple) -> None:
        """The group's time as empty is over: its newest held nudge is tried again (and asks again)."""
        message = self._held.pop(key, None)
        if message is not None:
            self.submit(key[0], message)

    @staticmethod
    async def _release_connections() -> None:
        """The embedded layer writes rows from this thread's executor: give its connection back when idle."""
        if isinstance(get_channel_layer(), DatabaseChannelLayer):
            await database_sync_to_async(connections.close_all)()

    def flush(self, timeout: float = 5.0) -> bool:
        """Waits until everything submitted so far was handed to the layer (tests, process exit)."""
        return self._idle.wait(timeout)


_sender = _Sender()
# Sent before the interpreter stops the thread pools the embedded layer writes through: a plain atexit
# hook runs after them, and a command that published just before it exits (seed_demo's demo run)
# printed "cannot schedule new futures after shutdown" tracebacks and lost its last messages.
# threading._register_atexit is the hook concurrent.futures itself uses for that shutdown.
getattr(threading, "_register_atexit", atexit.register)(_sender.flush, 2.0)


def publish(group: str, event: str, **data: Any) -> None:
    """Send soon (this process's sender thread). Prefer `publish_after_commit` inside services."""
    if get_channel_layer() is None:
        return
    _sender.submit(group, {"type": CONSUMER_HANDLER, "event": event, "data": data})


def flush(timeout: float = 5.0) -> bool:
    return _sender.flush(timeout)


def publish_after_commit(group: str, event: str, **data: Any) -> None:
    transaction.on_commit(lambda: publish(group, event, **data))
