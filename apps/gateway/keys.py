"""Every request's gateway key, checked against the database as it is now, in as few queries as that allows.

Each request's key is answered by a query sent after the request arrived, so a key revoked (or whose
creator was demoted or removed) before a request arrived is refused on that request, open sessions
included. Requests bearing the same key that arrive while a query for it is on its way wait for the next
query, which answers all of them: under many concurrent sessions of one key that is one query per round
trip instead of one per request, the same answer each request would have had on its own.

The queries run on a few threads of their own that keep their database connections between checks
(`CheckThreads`): a check is one round trip, not a pool checkout with its test query as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Generic, TypeVar

from django.db import InterfaceError, OperationalError, connection

Standing = TypeVar("Standing")


class KeyChecks(Generic[Standing]):
    """Coalesces concurrent checks of the same bearer value into one query at a time (see the module)."""

    def __init__(self, check: Callable[[str], Awaitable[Standing]]) -> None:
        self._check = check
        self._waiting: dict[str, asyncio.Future[Standing]] = {}  # bearer -> the answer of a query not yet sent
        self._checking: dict[str, asyncio.Task[None]] = {}  # bearer -> the task sending its queries

    async def standing(self, bearer: str) -> Standing:
        """The bearer's standing from a query sent after this call began. Raises what the check raises."""
        answer = self._waiting.get(bearer)
        if answer is None:
            answer = self._waiting[bearer] = asyncio.get_running_loop().create_future()
            answer.add_done_callback(_retrieved)
            if bearer not in self._checking:
                self._checking[bearer] = asyncio.get_running_loop().create_task(self._run(bearer))
        # Shielded: one waiter going away (its client hung up) must not cancel the others' answer.
        return await asyncio.shield(answer)

    async def _run(self, bearer: str) -> None:
        answer = None
        try:
            while (answer := self._waiting.pop(bearer, None)) is not None:
                try:
                    standing = await self._check(bearer)
                except Exception as exc:  # every waiter of this query gets it (e.g. the database is down)
                    answer.set_exception(exc)
                else:
                    answer.set_result(standing)
        finally:
            del self._checking[bearer]
            for left in (answer, self._waiting.pop(bearer, None)):  # only when this task was cancelled
                if left is not None and not left.done():
                    left.cancel()


def _retrieved(answer: asyncio.Future) -> None:
    if not answer.cancelled():
        answer.exception()  # read, so that an error no waiter was left to take is not logged as lost


class CheckThreads:
    """Threads for key checks, each keeping its database connection (the gateway's other ORM work hands its
    connection back to the pool after each call, and the pool tests it before lending it again: a second
    round trip that every request would pay here). A connection the database dropped (a restart, a
    failover) is closed and the check made once more on a new one from the pool, so a restart costs no
    request; when that fails too, the error goes to the caller (HTTP 503)."""

    def __init__(self, threads: int = 4) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gateway-keys")

    async def run(self, fn: Callable[..., Standing], *args: Any, **kwargs: Any) -> Standing:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(_on_kept_connection, fn,
                                                                                        args, kwargs))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _on_kept_connection(fn: Callable[..., Standing], args: tuple, kwargs: dict) -> Standing:
    try:
        return fn(*args, **kwargs)
    except (OperationalError, InterfaceError):
        connection.close()
        return fn(*args, **kwargs)
