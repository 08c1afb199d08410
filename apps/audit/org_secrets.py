"""An organisation's own secrets, by value, for redacting text that came from outside.

Every error text a provider, an MCP server or a webhook receiver sends back goes through
`redact_outside` (or `OrgSecrets.redact`) before it is stored, shown, logged or sent on: such a
service may quote back the key it was given, and a pattern cannot recognise an arbitrary key.

The values are decrypted when an error text needs them (never on a step that went well), and kept
only as long as the `OrgSecrets` object that holds them. Gateway keys and API tokens are stored
only as hashes: the patterns (agw_, al_) find them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from django.apps import apps
from django.db.models import TextField
from django.db.models.functions import Cast

from apps.audit.redaction import redact_text, values_pattern
from apps.core.encryption import DecryptionFailed, decrypt


class OrgSecrets:
    """One organisation's secret values (LLM connection keys, MCP server environment values and headers,
    webhook signing secrets), decrypted once, as a pattern that masks them in any text."""

    def __init__(self, org_id: UUID | str | None) -> None:
        self.org_id = org_id
        self._pattern: re.Pattern[str] | None = None
        self._loaded = False

    @property
    def pattern(self) -> re.Pattern[str] | None:
        if not self._loaded:
            self._pattern = values_pattern(secret_values(self.org_id)) if self.org_id else None
            self._loaded = True
        return self._pattern

    def redact(self, text: str) -> str:
        """`text` (from outside) with the org's secret values and anything shaped like a credential masked."""
        if not text:
            return text
        return redact_text(text, self.pattern)

    def redact_all(self, value: Any) -> Any:
        """Every string inside a JSON-like value (a tool's error result), redacted as `redact` does."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self.redact_all(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_all(v) for v in value]
        return value


def redact_outside(text: str, *, org_id: UUID | str | None) -> str:
    """`text` from a provider, an MCP server or a webhook receiver, safe to store: the org's secret values
    (in any spelling) and anything shaped like a credential masked. Reads the org's secrets only when
    `text` is not empty."""
    return OrgSecrets(org_id).redact(text) if text else text


def secret_values(org_id: UUID | str) -> list[str]:
    """The organisation's secret values in clear. A value that can no longer be decrypted (a rotated-out
    key) cannot be in anything sent to a remote service either, and is skipped."""
    return [value for value in _stored_secrets(org_id) if isinstance(value, str) and value]


def _stored_secrets(org_id: UUID | str) -> Iterator[str]:
    # By app label: the audit app sits below the apps that own these tables. Read as ciphertext (a cast to
    # text skips the field's decryption) so one value that cannot be decrypted does not hide the others.
    sources = {"agents.LlmConnection": ("api_key",), "registry.McpServer": ("env", "headers", "oauth_secrets"),
               "notifications.Webhook": ("secret",)}
    for model_label, fields in sources.items():
        rows = apps.get_model(model_label).objects.filter(org_id=org_id).values_list(
            *(Cast(f, output_field=TextField()) for f in fields))
        for row in rows:
            for ciphertext in row:
                if not ciphertext:
                    continue
                try:
                    yield from _strings(json.loads(decrypt(ciphertext)))
                except DecryptionFailed:
                    continue


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
        scheme, _, credential = value.partition(" ")  # "Bearer <token>", "Basic <base64>"
        if credential and scheme.isalpha():
            yield credential.strip()
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
