"""Model fields for secrets: stored encrypted, decrypted only where they are used."""

from __future__ import annotations

import json
from typing import Any

from django.db import models

from apps.core.encryption import decrypt, encrypt


class EncryptedJSONField(models.TextField):
    """A JSON value (typically a dict of secret names to values) stored as Fernet ciphertext.

    Forms and API schemas must never render it back: show the keys, accept new values.
    """

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        if value is None or value == "":
            return None
        return json.loads(decrypt(value))

    def to_python(self, value: Any) -> Any:
        return value

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return encrypt(json.dumps(value, sort_keys=True))
