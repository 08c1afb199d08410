"""Reading a few columns of a model with SQL built once per process, for reads made on every engine step.

Django compiles a queryset to SQL each time it is evaluated. For the run engine's per-step reads (the run
row at each step boundary, the live tool and its server at dispatch; a new task's claim, turn and last
ledger rows) the compiling cost more than the query itself: ~0.5 ms and ~1 ms of CPU per step against
~0.25 ms for the round trip (bench/run.py). A `Columns` lists its columns once; `instance` and `assign`
turn a row into model state as the ORM does (the backend's and the fields' converters, then
`Model.from_db`), so rows read this way behave like any other, on Postgres and on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Model


def fetch(sql: str, params: Sequence[Any] | dict[str, Any], *, using: str = "default") -> list[tuple]:
    """The rows of one statement built from `Columns`."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


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

    def param(self, name: str, value: Any) -> Any:
        """`value` as the database takes it for a comparison with field `name` (SQLite keeps UUIDs as hex)."""
        return self.model._meta.get_field(name).get_db_prep_value(value, connections[self.using])

    def __len__(self) -> int:
        return len(self.attnames)

    def _values(self, row: Sequence[Any]) -> list[Any]:
        values = list(row)
        connection = connections[self.using]
        for index, column, converters in self._converters:
            for convert in converters:
                values[index] = convert(values[index], column, connection)
        return values

    def instance(self, row: Sequence[Any]) -> Model:
        """A model instance with these columns loaded (the others deferred, read on access)."""
        return self.model.from_db(self.using, self.attnames, self._values(row))

    def assign(self, obj: Model, row: Sequence[Any]) -> None:
        """Sets these columns of `obj` from `row` (a re-read of the same row)."""
        for attname, value in zip(self.attnames, self._values(row), strict=True):
            setattr(obj, attname, value)
