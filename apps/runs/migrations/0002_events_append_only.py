"""Run events are append-only: the database refuses UPDATE on them (Postgres and SQLite).
Deleting stays possible, for retention and for deleting an organisation with its runs."""

from django.db import migrations

PG_CREATE = """
CREATE OR REPLACE FUNCTION run_event_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'run events are append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER run_event_no_update BEFORE UPDATE ON runs_runevent
  FOR EACH ROW EXECUTE FUNCTION run_event_append_only();
"""
PG_DROP = """
DROP TRIGGER IF EXISTS run_event_no_update ON runs_runevent;
DROP FUNCTION IF EXISTS run_event_append_only();
"""
SQLITE_CREATE = """CREATE TRIGGER run_event_no_update BEFORE UPDATE ON runs_runevent
    BEGIN SELECT RAISE(ABORT, 'run events are append-only'); END;"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS run_event_no_update"


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor in ("postgresql", "sqlite"):
        schema_editor.execute(PG_CREATE if vendor == "postgresql" else SQLITE_CREATE)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor in ("postgresql", "sqlite"):
        schema_editor.execute(PG_DROP if vendor == "postgresql" else SQLITE_DROP)


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
