"""Reads and writes made on every engine step, with SQL built once per process.

Django compiles a queryset to SQL each time it is evaluated. For the run engine's per-step reads (the run
row at each step boundary, the live tool and its server at dispatch; a new task's claim, turn and last
ledger rows) the compiling cost more than the query itself: ~0.5 ms and ~1 ms of CPU per step against
~0.25 ms for the round trip (bench/run.py). A `Columns` lists its columns once; `instance` and `assign`
turn a row into model state as the ORM does (the backend's and the fields' converters, then
`Model.from_db`), so rows read this way behave like any other, on Postgres and on SQLite.

The step's own writes were the same: `Model.save()` and `bulk_create` compiled an INSERT per row, ~0.3 ms of
CPU each, three times a step, where the statement's round trip is shared by the whole step's batch
(apps.core.db.pipeline). `Inserts` and `Update` build their statements once and prepare each value as the
ORM does (`pre_save`, then `get_db_prep_save`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Model

from apps.core.db import pipeline


def fetch(sql: str, params: Sequence[Any] | dict[str, Any], *, using: str = "default") -> list[tuple]:
    """The rows of one statement built from `Columns`."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetch_together(statements: Sequence[tuple[str, Sequence[Any]]], *, using: str = "default") -> list[list[tuple]]:
    """The rows of each statement, all sent before the first answer is awaited: one round trip on Postgres
    (apps.core.db.pipeline), one each elsewhere. For reads that do not depend on each other's answers."""
    connection = connections[using]
    with pipeline(using):
        cursors = []
        for sql, params in statements:
            cursor = connection.cursor()
            cursor.execute(sql, params)
            cursors.append(cursor)
        found = [cursor.fetchall() for cursor in cursors]  # the first waits for every answer
    for cursor in cursors:
        cursor.close()
    return found


def split(row: Sequence[Any], *parts: Columns) -> list[Sequence[Any]]:
    """A joined row cut into each table's columns, in the order of `parts`."""
    out, start = [], 0
    for columns in parts:
        out.append(row[start:start + len(columns)])
        start += len(columns)
    return out


def cache_related(obj: Model, name: str, parts: list[Model]) -> None:
    """`obj.<name>.all()` answers `parts` without a query (what `prefetch_related` leaves behind)."""
    queryset = getattr(obj, name).all()
    queryset._result_cache, queryset._prefetch_done = parts, True
    obj.__dict__.setdefault("_prefetched_objects_cache", {})[name] = queryset


class Columns:
    """Some of a model's columns, as `alias.column` SQL, and the way back from a row to the model."""

    def __init__(self, model: type[Model], names: Iterable[str], alias: str, *, using: str = "default") -> None:
        wanted = {model._meta.get_field(name) for name in names}
        fields = [field for field in model._meta.concrete_fields if field in wanted]  # from_db wants model order
        connection = connections[using]
        quote = connection.ops.quote_name
        self.model, self.using = model, using
        self.table = quote(model._meta.db_table)
        self.attnames = [field.attname for field in fields]
        self.sql = ", ".join(f"{alias}.{quote(field.column)}" for field in fields)
        # What SQLCompiler.get_converters finds for the same columns (JSON text, SQLite's ints and strings).
        self._converters = []
        for index, field in enumerate(fields):
            column = field.get_col(alias)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                self._converters.append((index, column, found))

    @classmethod
    def every(cls, model: type[Model], alias: str, *, using: str = "default") -> Columns:
        """All of the model's columns."""
        return cls(model, [field.name for field in model._meta.concrete_fields], alias, using=using)

    def param(self, name: str, value: Any) -> Any:
        """`value` as the database takes it for a comparison with field `name` (SQLite keeps UUIDs as hex)."""
        return self.model._meta.get_field(name).get_db_prep_value(value, connections[self.using])

    def __len__(self) -> int:
        return len(self.attnames)

    def values(self, row: Sequence[Any]) -> list[Any]:
        """`row`'s values as the model's fields hold them (the converters applied)."""
        values = list(row)
        connection = connections[self.using]
        for index, column, converters in self._converters:
            for convert in converters:
                values[index] = convert(values[index], column, connection)
        return values

    def instance(self, row: Sequence[Any]) -> Model:
        """A model instance with these columns loaded (the others deferred, read on access)."""
        return self.model.from_db(self.using, self.attnames, self.values(row))

    def assign(self, obj: Model, row: Sequence[Any]) -> None:
        """Sets these columns of `obj` from `row` (a re-read of the same row)."""
        for attname, value in zip(self.attnames, self.values(row), strict=True):
            setattr(obj, attname, value)


class Inserts:
    """INSERT of whole rows of a model whose primary key is set in Python (a UUID default): what `save()` of a
    new instance, or `bulk_create`, writes, without compiling it each time. No signals are sent: only for
    models nothing listens to."""

    def __init__(self, model: type[Model], *, using: str = "default") -> None:
        quote = connections[using].ops.quote_name
        self.model, self.using = model, using
        self.fields = [field for field in model._meta.concrete_fields if not field.generated]  # the database's own
        self._sql = (f"INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608 (names from the model only)
                     f"({', '.join(quote(field.column) for field in self.fields)}) "
                     f"VALUES ({', '.join(['%s'] * len(self.fields))})")

    def send(self, objs: Sequence[Model]) -> None:
        """Inserts `objs`; like `save()`, fills their auto_now fields and marks them saved.

        Several rows go as one single-row statement executed once per row (psycopg sends them all before
        reading an answer: one round trip), not as one statement of many rows: psycopg converts a statement's
        `%s` placeholders with a regular expression, and caches the result only for statements of up to 50
        parameters, so a many-row INSERT was parsed again at every batch (a third of the gateway ledger
        writer's CPU)."""
        if not objs:
            return
        connection = connections[self.using]
        rows = []
        for obj in objs:
            rows.append([field.get_db_prep_save(field.pre_save(obj, True), connection) for field in self.fields])
            obj._state.adding, obj._state.db = False, self.using
        with connection.cursor() as cursor:
            if len(rows) == 1:
                cursor.execute(self._sql, rows[0])
            else:
                cursor.executemany(self._sql, rows)


class Update:
    """`UPDATE ... SET <fields> WHERE <keys>` (each key compared with `=`), built once."""

    def __init__(self, model: type[Model], fields: Iterable[str], keys: Iterable[str], *,
                 using: str = "default") -> None:
        quote = connections[using].ops.quote_name
        meta = model._meta
        self.using = using
        self.fields = [meta.get_field(name) for name in fields]
        self.keys = [meta.get_field(name) for name in keys]
        self.sql = (f"UPDATE {quote(meta.db_table)} SET "  # noqa: S608 (names from the model only)
                    f"{', '.join(f'{quote(field.column)} = %s' for field in self.fields)} "
                    f"WHERE {' AND '.join(f'{quote(key.column)} = %s' for key in self.keys)}")

    def execute(self, values: dict[str, Any], keys: dict[str, Any]) -> int:
        """Runs it with `values` and `keys` (as `params`); the rows it changed (-1 inside a pipeline, which reads
        nothing back until its end)."""
        with connections[self.using].cursor() as cursor:
            cursor.execute(self.sql, self.params(values, keys))
            return cursor.rowcount

    def save(self, obj: Model) -> int:
        """`obj.save(update_fields=<these fields>)`, uncompiled: the fields and keys as `obj` holds them (an
        auto_now field is the caller's to set). The rows it changed, as `execute`."""
        return self.execute({field.name: getattr(obj, field.attname) for field in self.fields},
                            {key.name: getattr(obj, key.attname) for key in self.keys})

    def params(self, values: dict[str, Any], keys: dict[str, Any]) -> list[Any]:
        """`values` for every field and `keys` for every key, by field name, as the database takes them."""
        connection = connections[self.using]
        return ([field.get_db_prep_save(values[field.name], connection) for field in self.fields]
                + [key.get_db_prep_value(keys[key.name], connection) for key in self.keys])
