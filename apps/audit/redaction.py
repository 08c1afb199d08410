"""Redaction: what an audit row, a log line or a trace may never contain."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[redacted]"
SECRET_KEY_PATTERN = re.compile(
    r"pass(word)?|secret|token|api[_-]?key|authori[sz]ation|cookie|credential|private[_-]?key|^env$|^headers$",
    re.IGNORECASE,
)
# Values that look like credentials whatever key they sit under: our own API tokens (al_), gateway keys
# (agw_) and webhook secrets (whsec_), provider keys (OpenAI/Anthropic sk-, Stripe sk_live_, Google AIza,
# AWS AKIA), GitHub and Slack tokens, JWTs, credentials after an auth scheme, and private-key PEM blocks
# (to the end of the text when it was cut short). The lookaheads name every first character and prefix:
# every string of every event is searched, and they let most positions fail at once instead of trying
# every branch.
SECRET_VALUE_PATTERN = re.compile(
    r"(?=[aAwsrgxeB-])(?=al_|agw_|whsec_|sk[-_]|rk_|gh|github_|xox|AKIA|AIza|eyJ|Bearer|Basic|-----)"
    r"(?:\b(?:(?:al|agw|whsec)_[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|"
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|"
    r"AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*|"
    r"Bearer\s+[A-Za-z0-9._~+/=-]{8,}|Basic\s+(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2})"
    r"|-----BEGIN[A-Z ]*PRIVATE KEY-----(?:.*?-----END[A-Z ]*PRIVATE KEY-----|.*))",
    re.DOTALL,
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


# --- text that came from outside -------------------------------------------------------------------
# A provider, an MCP server or a webhook receiver may quote back what it was sent ("Incorrect API key
# provided: <key>"), so its text is masked by the organisation's own secret values, in every spelling a
# remote service might use, as well as by shape (`apps.audit.org_secrets` gathers the values).

# "api_key=...", "password: ..." in a URL, a config dump or a JSON error body: the value after the name.
ASSIGNED_SECRET_PATTERN = re.compile(
    r"""(?i)\b((?:api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|secret|password|passwd|token)"""
    r"""["']?\s*[=:]\s*["']?)(?!\[redacted\])([^\s"'&,;<>]{6,})"""
)
MIN_SECRET_CHARS = 6  # shorter values (a flag, a port) would mask ordinary words
MIN_ENCODED_CHARS = 12  # base64 of a shorter value leaves too few characters that do not depend on its context


def value_spellings(value: str) -> set[str]:
    """How a secret may be written in someone else's text: as it is, URL-encoded, JSON-escaped, in hex, and
    the part of its base64 (standard and URL-safe) that does not depend on what surrounds it, at each of the
    three byte alignments it can have inside a longer encoded string ("Basic <user:secret>")."""
    if len(value) < MIN_SECRET_CHARS:
        return set()
    raw = value.encode()
    found = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1], raw.hex()}
    if len(raw) >= MIN_ENCODED_CHARS:
        for shift in range(3):
            start, end = -(-8 * shift // 6), 8 * (shift + len(raw)) // 6
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                found.add(encode(b"\0" * shift + raw).decode()[start:end])
    return {form for form in found if len(form) >= MIN_SECRET_CHARS}


def values_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern for every spelling of every value, longest first (a value inside another is masked whole)."""
    forms = {form for value in values if isinstance(value, str) for form in value_spellings(value)}
    if not forms:
        return None
    return re.compile("|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True)))


def redact_text(text: str, known: re.Pattern[str] | None = None) -> str:
    """Outside text with the known secret values (see `values_pattern`) and anything shaped like a
    credential masked."""
    if not text:
        return text
    if known is not None:
        text = known.sub(REDACTED, text)
    text = SECRET_VALUE_PATTERN.sub(REDACTED, text)
    return ASSIGNED_SECRET_PATTERN.sub(lambda m: m.group(1) + REDACTED, text)
