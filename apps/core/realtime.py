"""Realtime: group names (one place) and publishing after commit.

An event is small: a name and ids/counters. Consumers turn it into the same partial the page
renders; nothing else travels over the socket. Publishing waits for the transaction to commit,
so a browser never hears about a row it cannot yet read.

Sending is off the caller's path: `publish` hands the message to this process's sender thread
(one event loop, one channel layer) and returns in microseconds, so a worker's step never waits
for Redis (bench/run.py: "publish cost"). Messages that only nudge a reader of the events table
(`run.event`: the consumer reads every event after its last seq) are coalesced per group while
they wait: a burst of 500 events sends a few nudges, and none is needed per event, so the
channel layer's per-channel capacity can never drop the tail of a burst. Other messages are
sent each, in order. A live update is best effort: pages re-read on load.
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

from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

CONSUMER_HANDLER = "realtime.event"


def org_group(org_id: UUID | str) -> str:
    """Everything an organisation's open pages may update (inbox badge, dashboard tiles)."""
    return f"org.{org_id}"


def run_group(run_id: UUID | str) -> str:
    """One run's trace page."""
    return f"run.{run_id}"


# Events whose message only says "there is more to read" (the reader catches up from a table):
# while waiting to be sent, a newer one replaces an older one for the same group.
COALESCED = frozenset({"run.event"})


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

    def submit(self, group: str, message: dict) -> None:
        with self._lock:
            if message["event"] in COALESCED:
                key = (group, message["event"])
                self._pending.pop(key, None)
            else:
                self._serial += 1
                key = (group, message["event"], self._serial)
            self._pending[key] = message
            self._idle.clear()
            if self._loop is None or not self._loop.is_running() or self._pid != os.getpid():
                self._start()  # first use, or a forked child (prefork workers) whose parent had started one
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
                with self._lock:
                    (group, *_), message = self._pending.popitem(last=False)
                try:
                    await get_channel_layer().group_send(group, message)  # looked up each time: settings may change
                except Exception:
                    # A lost live update must never fail the write that caused it: pages re-read on load.
                    logger.exception("realtime publish to %s failed", group)

    @staticmethod
    async def _release_connections() -> None:
        """The embedded layer writes rows from this thread's executor: give its connection back when idle."""
        from apps.core.channel_layer import DatabaseChannelLayer

        if isinstance(get_channel_layer(), DatabaseChannelLayer):
            from channels.db import database_sync_to_async
            from django.db import connections

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
