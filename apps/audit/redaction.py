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


# (the setting's value, the key -> "secret" / "count" / "" decisions made under it): every key of every event
# and audit row is asked (about five events a run step), and a deployment's key names are few.
_decided: tuple[Any, dict[str, str]] = ((), {})
KEYS_KEPT = 4096


def _key_decisions() -> dict[str, str]:
    """The decisions for the configured sensitive names (setting AIRLOCK_SENSITIVE_ARGUMENTS, matched whole),
    started again only when the setting is another object."""
    global _decided
    from django.conf import settings

    configured = getattr(settings, "AIRLOCK_SENSITIVE_ARGUMENTS", ())
    if configured is not _decided[0]:
        _decided = (configured, {})
    return _decided[1]


def sensitive_names() -> frozenset[str]:
    """Argument names an organisation's deployment adds (setting AIRLOCK_SENSITIVE_ARGUMENTS), matched whole.
    Read once per key (see `_key_decisions`)."""
    from django.conf import settings

    return frozenset(n.strip().lower() for n in getattr(settings, "AIRLOCK_SENSITIVE_ARGUMENTS", ()) if n.strip())


# Token *counts* (input_tokens, tokens_out, token_budget ...) are numbers, not credentials.
TOKEN_COUNT_KEY = re.compile(r"^(tokens?_[a-z_]+|[a-z_]+_tokens|token_budget)$", re.IGNORECASE)


def _decide(key: str) -> str:
    if key.lower() in sensitive_names() or (SECRET_KEY_PATTERN.search(key) and not TOKEN_COUNT_KEY.match(key)):
        return "secret"
    return "count" if SECRET_KEY_PATTERN.search(key) else ""


def _secret_key(key: str, value: Any, decisions: dict[str, str]) -> bool:
    decided = decisions.get(key)
    if decided is None:
        if len(decisions) >= KEYS_KEPT:
            decisions.clear()
        decided = decisions[key] = _decide(key)
    # a token-count name holds a number; anything else under it is treated as a secret
    return decided == "secret" or (decided == "count" and not (isinstance(value, int | float)
                                                              and not isinstance(value, bool)))


def redact(value: Any, *, key: str = "") -> Any:
    return _redact(value, key, _key_decisions())


def _redact(value: Any, key: str, decisions: dict[str, str]) -> Any:
    if key and _secret_key(key, value, decisions):
        return REDACTED if value not in (None, "", [], {}) else value
    if isinstance(value, dict):
        return {k: _redact(v, str(k), decisions) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, "", decisions) for v in value]
    if isinstance(value, str):
        return SECRET_VALUE_PATTERN.sub(REDACTED, value)
    return value
