"""Redaction: what an audit row, a log line or a trace may never contain."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
SECRET_KEY_PATTERN = re.compile(
    r"pass(word)?|secret|token|api[_-]?key|authori[sz]ation|cookie|credential|private[_-]?key|^env$|^headers$",
    re.IGNORECASE,
)
# Values that look like credentials whatever key they sit under.
SECRET_VALUE_PATTERN = re.compile(
    r"\b(al_[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|xox[bp]-[A-Za-z0-9-]{10,}|"
    r"AKIA[0-9A-Z]{16}|Bearer\s+[A-Za-z0-9._~+/=-]{12,})"
)


_names: tuple[Any, frozenset[str]] = ((), frozenset())  # (the setting's value, its names)


def sensitive_names() -> frozenset[str]:
    """Argument names an organisation's deployment adds (setting AIRLOCK_SENSITIVE_ARGUMENTS), matched whole.
    Asked for every key of every event and audit row: built again only when the setting is another object."""
    global _names
    from django.conf import settings

    configured = getattr(settings, "AIRLOCK_SENSITIVE_ARGUMENTS", ())
    if configured is not _names[0]:
        _names = (configured, frozenset(n.strip().lower() for n in configured if n.strip()))
    return _names[1]


# Token *counts* (input_tokens, tokens_out, token_budget ...) are numbers, not credentials.
TOKEN_COUNT_KEY = re.compile(r"^(tokens?_[a-z_]+|[a-z_]+_tokens|token_budget)$", re.IGNORECASE)


def _secret_key(key: str, value: Any) -> bool:
    if key.lower() in sensitive_names():
        return True
    if not SECRET_KEY_PATTERN.search(key):
        return False
    return not (TOKEN_COUNT_KEY.match(key) and isinstance(value, int | float) and not isinstance(value, bool))


def redact(value: Any, *, key: str = "") -> Any:
    if key and _secret_key(key, value):
        return REDACTED if value not in (None, "", [], {}) else value
    if isinstance(value, dict):
        return {k: redact(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return SECRET_VALUE_PATTERN.sub(REDACTED, value)
    return value
