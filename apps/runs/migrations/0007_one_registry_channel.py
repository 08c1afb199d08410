"""Registry changes are notified on one channel, `airlock_registry`, with the org's id as the payload (was a
channel per org): a worker can then LISTEN before it claims a run, when it does not know the run's org yet,
in the claim's own round trip (apps/runs/worker.py, advance_run). Registry changes are few (syncs, an
admin's decisions), so hearing every org's and keeping its own costs nothing of note."""

from django.db import migrations

from apps.core.migration_ops import postgres_sql

REGISTRY = """
CREATE OR REPLACE FUNCTION airlock_registry_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify({channel}, {payload});
  ELSE
    PERFORM pg_notify({new_channel}, {new_payload});
  END IF;
  RETURN NULL;
END $$"""
ORG, NEW_ORG = "replace(OLD.org_id::text, '-', '')", "replace(NEW.org_id::text, '-', '')"
ONE_CHANNEL = REGISTRY.format(channel="'airlock_registry'", payload=ORG,
                              new_channel="'airlock_registry'", new_payload=NEW_ORG)
PER_ORG = REGISTRY.format(channel=f"'airlock_registry_' || {ORG}", payload="''",
                          new_channel=f"'airlock_registry_' || {NEW_ORG}", new_payload="''")


class Migration(migrations.Migration):

    dependencies = [("runs", "0006_change_notices")]

    operations = [postgres_sql([ONE_CHANNEL], [PER_ORG])]
