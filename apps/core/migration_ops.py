"""Migration operations shared by several apps' migrations. Keep what is here stable: applied migrations import it."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import migrations


def postgres_sql(create: Iterable[str], drop: Iterable[str]) -> migrations.RunPython:
    """Runs `create` on Postgres (and `drop` when migrating back), one statement at a time; nothing elsewhere:
    SQLite, embedded mode, has no triggers or NOTIFY, and there the code that listens reads instead."""
    create, drop = tuple(create), tuple(drop)

    def run(statements: tuple[str, ...]):
        def apply(apps, schema_editor):
            if schema_editor.connection.vendor == "postgresql":
                for statement in statements:
                    schema_editor.execute(statement)
        return apply

    return migrations.RunPython(run(create), run(drop))
