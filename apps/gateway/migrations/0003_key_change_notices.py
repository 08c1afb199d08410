"""Postgres tells every gateway process when a gateway key's standing may have changed (LISTEN/NOTIFY on
`airlock_gateway_keys`), so a process may answer a key it has checked from memory until then instead of asking
the database on every request (apps/gateway/keys.py, `HeardKeys`).

A key's standing is its own row (revoked, renamed, its rate or hold wait changed) and its creator's membership
in the key's organisation (demoted, removed). Triggers, not calls in the services: no code path that changes
either can forget the notice, and it goes out with the change's commit (never for one rolled back). A key's
`last_used_at` (written once a minute by the ledger) notifies nobody. New keys and new memberships notify
nobody either: a process keeps only keys that stand, and a new row cannot make one of them stop standing.
The payload is the organisation's id (empty for a TRUNCATE); SQLite has none of this, and there every request
reads its key.
"""

from django.db import migrations

from apps.core.migration_ops import postgres_sql

CHANNEL = "airlock_gateway_keys"
KEY_COLUMNS = ("org_id", "name", "agent_id", "key_hash", "created_by_id", "rate_limit_per_minute", "hold_wait_s",
               "revoked_at")
MEMBERSHIP_COLUMNS = ("org_id", "user_id", "role")


def _changed(columns: tuple[str, ...]) -> str:
    return (f"({', '.join(f'OLD.{c}' for c in columns)}) IS DISTINCT FROM "
            f"({', '.join(f'NEW.{c}' for c in columns)})")


CREATE = (
    f"""CREATE OR REPLACE FUNCTION airlock_gateway_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_LEVEL = 'STATEMENT' THEN
    PERFORM pg_notify('{CHANNEL}', '');
  ELSE
    PERFORM pg_notify('{CHANNEL}', replace(OLD.org_id::text, '-', ''));
  END IF;
  RETURN NULL;
END $$""",
    f"""CREATE TRIGGER airlock_gateway_key_changed AFTER UPDATE OF {', '.join(KEY_COLUMNS)} ON gateway_gatewaykey
       FOR EACH ROW WHEN ({_changed(KEY_COLUMNS)}) EXECUTE FUNCTION airlock_gateway_keys_changed()""",
    """CREATE TRIGGER airlock_gateway_key_deleted AFTER DELETE ON gateway_gatewaykey
       FOR EACH ROW EXECUTE FUNCTION airlock_gateway_keys_changed()""",
    """CREATE TRIGGER airlock_gateway_keys_truncated AFTER TRUNCATE ON gateway_gatewaykey
       FOR EACH STATEMENT EXECUTE FUNCTION airlock_gateway_keys_changed()""",
    f"""CREATE TRIGGER airlock_membership_changed AFTER UPDATE OF {', '.join(MEMBERSHIP_COLUMNS)}
       ON accounts_membership FOR EACH ROW WHEN ({_changed(MEMBERSHIP_COLUMNS)})
       EXECUTE FUNCTION airlock_gateway_keys_changed()""",
    """CREATE TRIGGER airlock_membership_deleted AFTER DELETE ON accounts_membership
       FOR EACH ROW EXECUTE FUNCTION airlock_gateway_keys_changed()""",
    """CREATE TRIGGER airlock_memberships_truncated AFTER TRUNCATE ON accounts_membership
       FOR EACH STATEMENT EXECUTE FUNCTION airlock_gateway_keys_changed()""",
)

DROP = (
    "DROP TRIGGER IF EXISTS airlock_gateway_key_changed ON gateway_gatewaykey",
    "DROP TRIGGER IF EXISTS airlock_gateway_key_deleted ON gateway_gatewaykey",
    "DROP TRIGGER IF EXISTS airlock_gateway_keys_truncated ON gateway_gatewaykey",
    "DROP TRIGGER IF EXISTS airlock_membership_changed ON accounts_membership",
    "DROP TRIGGER IF EXISTS airlock_membership_deleted ON accounts_membership",
    "DROP TRIGGER IF EXISTS airlock_memberships_truncated ON accounts_membership",
    "DROP FUNCTION IF EXISTS airlock_gateway_keys_changed()",
)


class Migration(migrations.Migration):

    dependencies = [("gateway", "0002_oauth_grants"), ("accounts", "0003_identity_provider_invite_mfa_required")]

    operations = [postgres_sql(CREATE, DROP)]
