"""`Idempotency-Key`: a retried request gets the first answer again, status and body, unchanged.

The first successful answer to a key is kept for a day (per organisation, in the shared cache),
bound to the request it answered (method, path and body). The same key on another request is a
422, never a silent answer to something else. The service behind the key still refuses duplicates
on its own (a run's key is unique in the database), so a lost cache entry never repeats the work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest

from apps.core.errors import ValidationFailed

HEADER = "Idempotency-Key"
KEPT_S = 24 * 3600
MAX_LENGTH = 200


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


def key_of(request: HttpRequest) -> str:
    """The request's key (empty: none); a key longer than MAX_LENGTH is refused, not cut."""
    key = (request.headers.get(HEADER) or "").strip()
    if len(key) > MAX_LENGTH:
        message = f"An {HEADER} has at most {MAX_LENGTH} characters."
        raise ValidationFailed(message, {HEADER: message})
    return key


def _slot(request: HttpRequest, key: str) -> str:
    return f"idempotency:{request.auth.org_id}:{hashlib.sha256(key.encode()).hexdigest()}"


def _fingerprint(request: HttpRequest) -> str:
    return hashlib.sha256(b"\n".join([request.method.encode(), request.path.encode(), request.body])).hexdigest()


def replay(request: HttpRequest) -> Answer | None:
    """The first answer to this request's key, or None (no key, or not answered yet).
    Raises ValidationFailed when the key answered a different request."""
    key = key_of(request)
    if not key:
        return None
    kept = cache.get(_slot(request, key))
    if kept is None:
        return None
    if kept["fingerprint"] != _fingerprint(request):
        message = f"This {HEADER} was used for a different request; use a new key for a new request."
        raise ValidationFailed(message, {HEADER: message})
    return Answer(kept["status"], kept["body"])


def remember(request: HttpRequest, answer: Answer) -> Answer:
    """Keeps the first answer to this request's key (a later one never replaces it)."""
    key = key_of(request)
    if key:
        cache.add(_slot(request, key), {"fingerprint": _fingerprint(request), "status": answer.status,
                                        "body": answer.body}, KEPT_S)
        kept = cache.get(_slot(request, key))
        if kept is not None:
            return Answer(kept["status"], kept["body"])
    return answer
