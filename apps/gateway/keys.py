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

On Postgres a key found standing is then answered from memory (`HeardKeys`) for as long as the process hears,
on a session of its own, every change that could end its standing: the triggers of migration gateway/0003
notify on commit when a key's row or any membership changes. Before each answer from memory the session's
socket is read (no round trip), so a revoke is refused from the first request after its notice arrived, well
under a millisecond after its commit here: the window the engine's tool checks at dispatch already have
(apps/runs/store/notices.py), where the query had the one between its answer and the call. A key is read again
at least every `REREAD_S`, whatever was heard; a session that is lost, or cannot be opened (a transaction
pooler: `AIRLOCK_CHANGE_NOTICES=0`), leaves every request to its query as before. The query was ~0.4 ms of the
gateway's CPU per call and a thread hop and a round trip on the call's path (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

import anyio.to_thread
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, connections

from apps.gateway import selectors

logger = logging.getLogger(__name__)

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


KEYS_CHANNEL = "airlock_gateway_keys"  # migration gateway/0003: a key's row or a membership changed
SESSIONS_CHANNEL = "airlock_gateway_sessions"  # migration gateway/0004: a gateway session's run stopped, or cancelled
REREAD_S = 10.0  # a key heard standing is read again at least this often (a session cut off without a word)
KEPT_LIMIT = 10_000


class Mark(NamedTuple):
    """What had been heard when a key's query was about to be sent, and when."""

    generation: int
    at: float


class HeardKeys(Generic[Standing]):
    """Gateway keys found standing, answered from memory while this process hears every change that could end
    their standing (see the module). Used from the event loop's thread only; the session is opened on another."""

    def __init__(self, on_session: Callable[[str], None] = lambda run_id: None) -> None:
        self._raw: Any = None  # the psycopg connection that listens; None while not listening
        # The same session hears the runs of gateway sessions (SESSIONS_CHANNEL): each run's id goes to
        # `on_session`, which must not block (drain runs on the event loop's thread).
        self._on_session = on_session
        self._generation = 0  # moves on every notice heard, and whenever listening starts or stops
        self._kept: dict[str, tuple[Standing, Mark]] = {}  # the key's hash -> its standing, and when it was read

    @property
    def listening(self) -> bool:
        return self._raw is not None

    async def listen(self) -> bool:
        """Opens the session and LISTENs. False where notices cannot be heard (SQLite, or turned off for a
        transaction pooler); raises what connecting raises."""
        if self._raw is not None:
            return True
        if connections["default"].vendor != "postgresql" or not getattr(settings, "AIRLOCK_CHANGE_NOTICES", True):
            return False
        self._raw = await anyio.to_thread.run_sync(_listening_session)
        self._moved()
        return True

    def close(self) -> None:
        raw, self._raw = self._raw, None
        self._moved()
        if raw is not None:
            raw.close()

    def get(self, raw: str) -> Standing | None:
        """The key's standing as last read, while nothing heard since could have changed it; else None."""
        mark = self.mark()
        kept = self._kept.get(selectors.hash_key(raw)) if mark is not None and selectors.is_key_shaped(raw) else None
        if kept is None or kept[1].generation != mark.generation or mark.at - kept[1].at > REREAD_S:
            return None
        return kept[0]

    def mark(self) -> Mark | None:
        """What has been heard up to now (None while not listening): take it before sending a key's query."""
        return Mark(self._generation, time.monotonic()) if self.drain() else None

    def keep(self, raw: str, standing: Standing, since: Mark | None) -> None:
        """Keeps a standing read by a query sent after `since`, unless something was heard meanwhile: the
        notice may be of a change that query did not see."""
        now = self.mark()
        if since is None or now is None or now.generation != since.generation or not selectors.is_key_shaped(raw):
            return
        if len(self._kept) >= KEPT_LIMIT:
            self._kept.clear()
        self._kept[selectors.hash_key(raw)] = (standing, since)

    def drain(self) -> bool:
        """Takes every notice that has reached the session's socket (libpq reads what is there without waiting;
        no round trip). False when not listening, or when the session turns out lost (then it is closed)."""
        raw = self._raw
        if raw is None:
            return False
        try:
            pgconn = raw.pgconn
            pgconn.consume_input()  # raises once the server has closed the session
            heard = False
            while (notice := pgconn.notifies()) is not None:
                if notice.relname == _SESSIONS:
                    self._on_session(notice.extra.decode())
                else:
                    heard = True
            if raw.broken or pgconn.status != _OK:
                raise OperationalError("the session listening for key changes was closed")
        except Exception:
            logger.warning("gateway: stopped hearing key changes; every request's key is read until listening again",
                           exc_info=logger.isEnabledFor(logging.DEBUG))
            self.close()
            return False
        if heard:
            self._moved()
        return True

    def _moved(self) -> None:
        self._generation += 1
        self._kept.clear()


_OK = 0  # psycopg.pq.ConnStatus.OK, without importing psycopg where Postgres is not used
_SESSIONS = SESSIONS_CHANNEL.encode()


def _listening_session() -> Any:
    """A session of the gateway's own (not the pool's: a pooled connection goes to other work) that LISTENs on
    KEYS_CHANNEL and SESSIONS_CHANNEL."""
    import psycopg

    # The process in its name: an operator reading pg_stat_activity can tell which gateway holds which session.
    params = {**connections["default"].get_connection_params(),
              "application_name": f"airlock gateway keys {os.getpid()}"}
    raw = psycopg.connect(**params, autocommit=True)
    try:
        raw.execute(f'LISTEN "{KEYS_CHANNEL}"; LISTEN "{SESSIONS_CHANNEL}"')
    except Exception:
        raw.close()
        raise
    return raw
