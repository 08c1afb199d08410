"""The single-column indexes on `run` of the step, ledger and event tables go: each table's unique key,
(run, position), (run, step, call_id) and (run, seq), leads with `run` and serves every lookup by run, so the
index on `run` alone was only ever written (on every engine step: a step row, a ledger row and its update,
three or four events).

The state change is Django's (`db_index=False`); the database change is a plain DROP INDEX on both backends,
because Django's own AlterField rebuilds the table on SQLite, which would drop what migration 0002 made there
by SQL (the events' append-only trigger)."""

import django.db.models.deletion
from django.db import migrations, models

# Django's names for them (schema_editor._create_index_name of table, ["run_id"], "" suffix): the same on
# every backend.
INDEXES = {"runs_runevent": "runs_runevent_run_id_8bd13aa7", "runs_runstep": "runs_runstep_run_id_b15bfaff",
           "runs_toolcall": "runs_toolcall_run_id_d2fbb3a3"}


def drop_indexes(apps, schema_editor):
    for name in INDEXES.values():
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def restore_indexes(apps, schema_editor):
    for table, name in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (run_id)")


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0007_one_registry_channel'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='runevent',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='events', to='runs.run'),
                ),
                migrations.AlterField(
                    model_name='runstep',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='steps', to='runs.run'),
                ),
                migrations.AlterField(
                    model_name='toolcall',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='ledger', to='runs.run'),
                ),
            ],
            database_operations=[migrations.RunPython(drop_indexes, restore_indexes)],
        ),
    ]
