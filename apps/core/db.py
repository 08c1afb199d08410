"""Postgres session settings for the processes that run the engine, and batched writes.

Web and API processes have Postgres plan every execution of a prepared statement for its own
parameters (config/settings.py: `plan_cache_mode=force_custom_plan`), because a plan made once for
any parameters can miss a partial index (the run list's filters) and be slower by 10-20x. A worker's
statements are the run engine's: reads and writes of one run's rows by id, the same ten or so every
step. Planning them again each time was ~10 % of a step (bench/run.py), so workers let Postgres keep
one plan per statement (`auto`, its default).

`pipeline()` sends a batch of writes without waiting for each answer: on this kind of machine a
round trip to Postgres costs more than the statement itself, and a step's writes were six of them.
`end_transaction()` is the last batch of a transaction with its COMMIT (and its BEGIN, when nothing went
out before): the run store's usual tool step writes all it has in one round trip.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, DataError, connections
from django.db.backends.signals import connection_created
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery

logger = logging.getLogger(__name__)
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE, without importing psycopg where Postgres is not used
RECEIVER_UID = "airlock-generic-plans"  # connection_created.disconnect(dispatch_uid=RECEIVER_UID) undoes it


def allow_generic_plans() -> None:
    """From now on, this process's Postgres connections may reuse generic plans (the open ones too)."""
    connection_created.connect(_set_auto, dispatch_uid=RECEIVER_UID)
    logger.debug("Postgres may reuse generic plans on this process's connections.")
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _set_auto(sender=type(connection), connection=connection)


def _set_auto(sender: Any, connection: Any, **_: Any) -> None:
    if connection.vendor != "postgresql" or connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = auto")


def connected(using: str = "default") -> Any:
    """The Django connection `using`, open and, with CONN_HEALTH_CHECKS, checked, as Django's own cursor makes it:
    code that speaks to psycopg's connection directly (a pipeline, a LISTEN) skips that cursor, and a connection
    the database dropped while the process was idle (a restart, `pg_terminate_backend`) would fail its first
    statement instead of being replaced."""
    connection = connections[using]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection


@contextmanager
def pipeline(using: str = "default", *, commit: bool = False) -> Iterator[None]:
    """The statements inside go out without waiting for each one's answer (psycopg's pipeline mode):
    a batch of writes costs one round trip instead of one each. A no-op on other databases.

    Only for statements whose results nothing reads inside the block: there `rowcount` is -1 (use
    `send_expected_update`), and an error is raised at the end of the block, not at its statement (as
    Django's error class), so no `except IntegrityError` around a statement inside can work.
    Fetching a result inside is correct but waits for every answer so far.

    `commit`: the block is the last thing its outermost `atomic` does, so its COMMIT goes out with the
    batch (one round trip for both, not two). Django's commit at the `atomic`'s exit then has nothing to
    send (psycopg's commit of an idle connection sends nothing) and runs its on_commit callbacks as usual;
    an error anywhere in the batch rolls the whole transaction back. Inside a savepoint or a caller's
    transaction it commits nothing: the outer block does, as always."""
    connection = connections[using]
    if connection.vendor != "postgresql" or not _can_pipeline():
        yield
        return
    connected(using)
    with _expected_updates(), connection.wrap_database_errors, connection.connection.pipeline():
        yield
        if commit and _ends_outermost(connection):
            # As a statement of the batch: psycopg's own commit() would wait for its answer before the
            # block's exit waits again. The exit's sync reads the server back as idle.
            with connection.connection.cursor() as cursor:
                cursor.execute("COMMIT", prepare=False)


@contextmanager
def end_transaction(using: str = "default", *, sent: Callable[[], None] | None = None) -> Iterator[None]:
    """`pipeline(commit=True)`, and when nothing of the transaction has gone out yet, its BEGIN in the batch
    too: the whole transaction in one round trip instead of two (psycopg waits for the answer to a BEGIN
    of its own before it sends the next statement, pipeline or not).

    `sent`: called once the whole batch, COMMIT included, has gone out and before its answers are waited
    for, so that other work overlaps the round trip. Only where this batch carries BEGIN and COMMIT (the
    path below); not called at all on the other. It must not raise: the server may commit whatever the
    client does next. The batch may still fail after it (the COMMIT is then not run), which the caller
    learns as the block raises.

    For that, psycopg is put in autocommit mode for the block, and BEGIN and COMMIT are statements of the
    batch; Django still counts itself inside its `atomic` (its on_commit callbacks wait for its exit, whose
    commit then finds the connection idle). A failed statement aborts the transaction on the server, the
    COMMIT is skipped, and the `atomic` rolls back as for any error."""
    connection = connections[using]
    raw = connection.connection
    if (connection.vendor != "postgresql" or not _can_pipeline() or raw is None or not _ends_outermost(connection)
            or raw.pgconn.transaction_status != _IDLE):
        with pipeline(using, commit=True):
            yield
        return
    raw.autocommit = True  # idle, so psycopg allows it; nothing is sent
    try:
        with _expected_updates(), connection.wrap_database_errors, raw.pipeline():
            raw.execute("BEGIN", prepare=False)
            yield
            raw.execute("COMMIT", prepare=False)  # in pipeline mode it returns once the batch is written out
            if sent is not None:
                sent()
    finally:
        # Committed: psycopg back as Django's `atomic` left it. Failed: the server's transaction is aborted (or
        # the connection broken) and Django's rollback at the `atomic`'s exit ends it, as for any error.
        if raw.pgconn.transaction_status == _IDLE:
            raw.autocommit = False


def _ends_outermost(connection: Any) -> bool:
    """Whether committing now ends exactly one `atomic` that Django opened with autocommit on (no savepoint,
    no caller's transaction around it): the only case in which its exit would commit next."""
    return (connection.in_atomic_block and len(connection.atomic_blocks) == 1 and not connection.savepoint_ids
            and connection.commit_on_exit and not connection.needs_rollback)


@functools.cache
def _can_pipeline() -> bool:
    import psycopg

    return psycopg.Pipeline.is_supported()  # libpq 14 or later (psycopg's binary wheels bundle one)


class NothingUpdated(DatabaseError):
    """A `send_expected_update` matched no row: its batch failed and its transaction rolled back whole."""


# The UPDATE's rows counted in the same statement; with none the cast fails (the text is not a number) and
# the server aborts the transaction. The cast depends on the count, so Postgres cannot fold it at planning.
_EXPECTED_UPDATE_SQL = "WITH changed AS ({update} RETURNING 1) SELECT ('{mark}' || count(*))::int FROM changed " \
                       "HAVING count(*) = 0"
_NOTHING_UPDATED = "airlock: expected update matched rows: "


def send_expected_update(queryset: QuerySet, **fields: Any) -> None:
    """`queryset.update(**fields)` that must change a row, for a batch (`pipeline`, `end_transaction`): a batch
    cannot show a row count before its COMMIT, so the statement checks it itself. When it matches none the
    whole transaction rolls back and the block raises `NothingUpdated`."""
    if connections[queryset.db].vendor != "postgresql":  # no batches there: the row count is known at once
        if not queryset.update(**fields):
            raise NothingUpdated("An update expected to change a row changed none.")
        return
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(fields)
    send_expected(*query.get_compiler(queryset.db).as_sql(), using=queryset.db)


def send_expected(sql: str, params: list[Any], *, using: str = "default") -> None:
    """`send_expected_update` of an UPDATE built already (apps.core.rows.Update)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            if not cursor.rowcount:
                raise NothingUpdated("An update expected to change a row changed none.")
        return
    cursor = connection.cursor()  # left open: the batch sets its results after this returns
    cursor.execute(_EXPECTED_UPDATE_SQL.format(update=sql, mark=_NOTHING_UPDATED), params)


@contextmanager
def _expected_updates() -> Iterator[None]:
    try:
        yield
    except DataError as error:
        if _NOTHING_UPDATED in str(error):
            raise NothingUpdated("An update the batch expected to change a row changed none.") from error
        raise
