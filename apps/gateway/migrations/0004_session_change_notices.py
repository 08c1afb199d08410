"""Postgres tells every gateway process when a gateway session's run stops running or is asked to stop
(LISTEN/NOTIFY on `airlock_gateway_sessions`, the run's id as the payload), so a process learns that a session
it holds was cancelled or ended elsewhere when it happens, instead of asking about every session it holds once a
second (apps/gateway/server.py, `Gateway.session` and `_end_sessions_over`).

A trigger on the run, not a call in `runs.services.cancel_run`: a run's status and cancel flag are changed by the
runs app's services, the engine and the gateway's ledger, and no path can forget the notice; it goes out with the
change's commit (never for one rolled back). Only a run that a gateway session owns notifies (one lookup in the
session table's unique index on `run_id`); the engine's runs, which change status a few times each, notify
nobody. SQLite has none of this; there the gateway asks about every session it holds at each poll, as before.
"""

from django.db import migrations

from apps.core.migration_ops import postgres_sql

CREATE = (
    # The channel is apps.gateway.keys.SESSIONS_CHANNEL (a migration keeps its own copy of what it writes).
    """CREATE OR REPLACE FUNCTION airlock_gateway_session_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM gateway_gatewaysession WHERE run_id = NEW.id) THEN
    PERFORM pg_notify('airlock_gateway_sessions', replace(NEW.id::text, '-', ''));
  END IF;
  RETURN NULL;
END $$""",
    """CREATE TRIGGER airlock_gateway_session_changed AFTER UPDATE OF status, cancel_requested ON runs_run
       FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                          OR OLD.cancel_requested IS DISTINCT FROM NEW.cancel_requested)
       EXECUTE FUNCTION airlock_gateway_session_changed()""",
)

DROP = (
    "DROP TRIGGER IF EXISTS airlock_gateway_session_changed ON runs_run",
    "DROP FUNCTION IF EXISTS airlock_gateway_session_changed()",
)


class Migration(migrations.Migration):

    dependencies = [("gateway", "0003_key_change_notices"), ("runs", "0020_events_keyed_by_run_and_seq")]

    operations = [postgres_sql(CREATE, DROP)]
