"""Every request's gateway key, checked against the database as it is now, in as few queries as that allows.

Each request's key is answered by a query sent after the request arrived, so a key revoked (or whose
creator was demoted or removed) before a request arrived is refused on that request, open sessions
included. Requests bearing the same key that arrive while a query for it is on its way wait for the next
query, which answers all of them: under many concurrent sessions of one key that is one query per round
trip instead of one per request, the same answer each request would have had on its own.

The queries run on a few threads of their own that keep their database connections between checks
(`CheckThreads`): a check is one round trip, not a pool checkout with its test query as well. On Postgres a
gateway key's query is the ORM's, compiled once per process (`KeyStatement`); its plain twin, the selector
that builds it on every call, checks everything else (OAuth access tokens) and serves SQLite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Generic, TypeVar

from django.db import InterfaceError, OperationalError, connection

from apps.gateway import selectors

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


class KeyStatement:
    """`selectors.bearer_standing` with a gateway key's query compiled once, not on every request.

    Building and compiling that query (an annotated queryset) took ~0.9 ms of CPU per check, seven
    times the query's own round trip. This runs the SQL the ORM compiled for `selectors.key_by_hash`
    on the calling thread's connection, and judges the row with the selector's own rules
    (`selectors.standing_of`). Postgres only: there the driver hands back the values the ORM would
    (UUIDs, aware datetimes) with no converters; elsewhere, and for other bearer values, the twin."""

    _HASH = "0" * 64  # stands for the presented key's hash while compiling

    def __init__(self, *, resource: str) -> None:
        self.resource = resource
        self._sql: str | None = None

    def __call__(self, raw: str) -> selectors.KeyStanding:
        if connection.vendor != "postgresql" or not selectors.is_key_shaped(raw):
            return selectors.bearer_standing(raw, resource=self.resource)
        with connection.cursor() as cursor:
            cursor.execute(self._compiled(), [selectors.hash_key(raw)])
            return selectors.standing_of(cursor.fetchone(), selectors.UNKNOWN_KEY)

    def _compiled(self) -> str:
        if self._sql is None:
            sql, params = selectors.key_by_hash(self._HASH)[:1].query.sql_with_params()
            if params != (self._HASH,):  # the statement would not be the selector's for another key
                raise RuntimeError(f"the key query binds {params!r}, expected only the key's hash")
            self._sql = sql
        return self._sql
