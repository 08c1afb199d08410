"""Postgres tells a worker driving a run when the run or its org's registry changes (LISTEN/NOTIFY), so the
engine need not read the run row and the tool's registry row again at every step (apps/runs/store/notices.py).

Triggers, not calls in the services that change those rows: no code path that changes a tool, a server or a
run's status, cancel flag or lease can forget the notice, and it goes out with the change's commit (never for
a change rolled back). Channels are per run and per org: a worker hears only what concerns the run it drives,
and only while it drives it. SQLite has none of this; there the engine reads at every step.
"""

from django.db import migrations

from apps.core.migration_ops import postgres_sql

NOTIFY = """
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('{prefix}' || replace(OLD.{column}::text, '-', ''), '');
  ELSE
    PERFORM pg_notify('{prefix}' || replace(NEW.{column}::text, '-', ''), '');
  END IF;
  RETURN NULL;
END $$"""

CREATE = (
    NOTIFY.format(name="airlock_run_changed", prefix="airlock_run_", column="id"),
    NOTIFY.format(name="airlock_registry_changed", prefix="airlock_registry_", column="org_id"),
    # What another process may change under a running run: its status, its cancel flag, its lease. The
    # engine's own writes at each step (counters, cursor, lease expiry) notify nobody.
    """CREATE TRIGGER airlock_run_changed AFTER UPDATE OF status, cancel_requested, lease_owner ON runs_run
       FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                          OR OLD.cancel_requested IS DISTINCT FROM NEW.cancel_requested
                          OR OLD.lease_owner IS DISTINCT FROM NEW.lease_owner)
       EXECUTE FUNCTION airlock_run_changed()""",
    "CREATE TRIGGER airlock_run_deleted AFTER DELETE ON runs_run FOR EACH ROW EXECUTE FUNCTION airlock_run_changed()",
    # Any change to a tool or a server: the policy at dispatch reads both.
    """CREATE TRIGGER airlock_tool_changed AFTER INSERT OR UPDATE OR DELETE ON registry_tool
       FOR EACH ROW EXECUTE FUNCTION airlock_registry_changed()""",
    """CREATE TRIGGER airlock_server_changed AFTER INSERT OR UPDATE OR DELETE ON registry_mcpserver
       FOR EACH ROW EXECUTE FUNCTION airlock_registry_changed()""",
)

DROP = (
    "DROP TRIGGER IF EXISTS airlock_run_changed ON runs_run",
    "DROP TRIGGER IF EXISTS airlock_run_deleted ON runs_run",
    "DROP TRIGGER IF EXISTS airlock_tool_changed ON registry_tool",
    "DROP TRIGGER IF EXISTS airlock_server_changed ON registry_mcpserver",
    "DROP FUNCTION IF EXISTS airlock_run_changed()",
    "DROP FUNCTION IF EXISTS airlock_registry_changed()",
)


class Migration(migrations.Migration):

    dependencies = [("runs", "0005_lz4_toast_compression"), ("registry", "0002_sync_warnings")]

    operations = [postgres_sql(CREATE, DROP)]
