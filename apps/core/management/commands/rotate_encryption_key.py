"""Re-encrypts every secret at rest under the first key of AIRLOCK_ENCRYPTION_KEY.

Rotation, without downtime (docs/operations.md, "Rotate the encryption key"):
1. put the new key first and keep the old one after it (`AIRLOCK_ENCRYPTION_KEY=new,old`) and restart
   every process: new values are written under the new key, old ones still read;
2. `manage.py rotate_encryption_key`: every stored secret is rewritten under the new key;
3. `manage.py rotate_encryption_key --check` says whether any value still needs an older key;
4. when it says none, drop the old key (`AIRLOCK_ENCRYPTION_KEY=new`) and restart.

Every model field of the kind `EncryptedJSONField` is found by introspection, so a secret field added
later is rotated without touching this command. The ciphertext is rewritten as is (MultiFernet.rotate):
values are never decrypted into this process's memory longer than the rotation of one value takes.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken
from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from apps.core.encryption import keyring
from apps.core.fields import EncryptedJSONField

BATCH = 500


def encrypted_columns() -> list[tuple[type, str, str]]:
    """(model, table, column) for every EncryptedJSONField of every installed model."""
    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, EncryptedJSONField):
                found.append((model, model._meta.db_table, field.column))
    return found


class Command(BaseCommand):
    help = "Re-encrypt every stored secret under the first AIRLOCK_ENCRYPTION_KEY (--check: only report)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--check", action="store_true",
                            help="change nothing; exit 1 when a value still needs a key other than the first")

    def handle(self, *args, check: bool, **options) -> None:
        keys = list(settings.AIRLOCK_ENCRYPTION_KEYS)
        if not keys:
            raise CommandError("AIRLOCK_ENCRYPTION_KEY is not set: there is no key to rotate to.")
        newest, every = Fernet(keys[0].encode()), keyring()
        stale = unreadable = rotated = 0
        for model, table, column in encrypted_columns():
            pk = connection.ops.quote_name(model._meta.pk.column)
            quoted_table, quoted = connection.ops.quote_name(table), connection.ops.quote_name(column)
            with connection.cursor() as cursor:
                # Names from the model registry, quoted; no outside text reaches this statement.
                cursor.execute(f"SELECT {pk}, {quoted} FROM {quoted_table} "  # noqa: S608
                               f"WHERE {quoted} IS NOT NULL AND {quoted} <> ''")
                rows = cursor.fetchall()
            needing = []
            for row_id, token in rows:
                try:
                    newest.decrypt(token.encode())
                    continue
                except InvalidToken:
                    pass
                try:
                    needing.append((every.rotate(token.encode()).decode(), row_id))
                except InvalidToken:
                    unreadable += 1
                    self.stderr.write(f"{table}.{column} row {row_id}: no configured key reads it")
            stale += len(needing)
            if needing and not check:
                for start in range(0, len(needing), BATCH):
                    with transaction.atomic(), connection.cursor() as cursor:
                        cursor.executemany(f"UPDATE {quoted_table} SET {quoted} = %s WHERE {pk} = %s",  # noqa: S608
                                           needing[start:start + BATCH])
                rotated += len(needing)
            self.stdout.write(f"{table}.{column}: {len(rows)} value(s), {len(needing)} under an older key")
        if check:
            self.stdout.write(f"{stale} value(s) still need an older key; {unreadable} unreadable.")
            if stale or unreadable:
                raise CommandError("Not ready to retire the old key(s): run rotate_encryption_key first.")
            self.stdout.write("Every secret reads with the first key alone: the older keys can be removed.")
            return
        self.stdout.write(f"Re-encrypted {rotated} value(s) under the first key; {unreadable} unreadable.")
        if unreadable:
            raise CommandError("Some values could not be read with any configured key (see above).")
