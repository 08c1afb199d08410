"""Refuse rewriting audit rows in the database itself, so not even a raw query or a bug
elsewhere can change history. Postgres refuses UPDATE and DELETE (TRUNCATE, which test
flushes use, stays possible for the table owner). SQLite refuses UPDATE only: Django's test
flush deletes rows there, and SQLite is the laptop mode."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'audit events are append-only';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_event_no_update_delete
  BEFORE UPDATE OR DELETE ON audit_auditevent
  FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS audit_event_no_update_delete ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_event_append_only();
"""


SQLITE_CREATE = [
    f"""CREATE TRIGGER audit_event_no_{op.lower()} BEFORE {op} ON audit_auditevent
    BEGIN SELECT RAISE(ABORT, 'audit events are append-only'); END;"""
    for op in ("UPDATE",)
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS audit_event_no_update"]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)
    elif schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_CREATE:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)
    elif schema_editor.connection.vendor == "sqlite":
        for statement in SQLITE_DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
