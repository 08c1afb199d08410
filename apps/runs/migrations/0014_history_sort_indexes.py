from django.db import migrations

# Postgres only (SQLite refuses NULLS LAST in an index; embedded mode sorts its few runs): the run list's cost and
# token sorts, in exactly the order apps.runs.history.SORTS asks for, so a page of them is read in order instead of
# every run of the organisation being sorted (0.3-0.6 s at a million runs, bench/history.py).
POSTGRES_INDEXES = {
    "run_org_cost": "CREATE INDEX IF NOT EXISTS run_org_cost ON runs_run "
                    "(org_id, cost_usd DESC NULLS LAST, created_at DESC)",
    "run_org_tokens": "CREATE INDEX IF NOT EXISTS run_org_tokens ON runs_run (org_id, tokens_in DESC, created_at DESC)",
}


def create_postgres_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in POSTGRES_INDEXES.values():
            schema_editor.execute(sql)


def drop_postgres_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name in POSTGRES_INDEXES:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0013_run_messages_append_only"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="run_org_cost"),
        migrations.RunPython(create_postgres_indexes, drop_postgres_indexes),
    ]
