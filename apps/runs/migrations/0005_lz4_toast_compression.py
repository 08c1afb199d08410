"""The growing conversation (runs_runstep.messages) and tool results (runs_toolcall.result) are compressed
with lz4 rather than Postgres's default pglz when they are TOASTed.

Each engine step rewrites a turn's whole jsonb history (`messages || new`); pglz spends most of that time
trying to compress it. Measured on a 100-step history of 2 KB results: the append's last ten steps 6.1 ms
with pglz, 3.0 ms with lz4 (docs/performance.md, flatness). Values written before keep their compression
until they are next rewritten. A Postgres built without lz4 keeps pglz; SQLite has no such setting.
"""

from django.db import migrations

COLUMNS = (("runs_runstep", "messages"), ("runs_toolcall", "result"))


def _set(method: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for table, column in COLUMNS:
            schema_editor.execute(f"""
                DO $$ BEGIN
                  EXECUTE 'ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}';
                EXCEPTION WHEN feature_not_supported THEN NULL;  -- a server built without lz4
                END $$""")
    return apply


class Migration(migrations.Migration):

    dependencies = [("runs", "0004_run_status_covers_cost")]

    operations = [migrations.RunPython(_set("lz4"), _set("default"), elidable=True)]
