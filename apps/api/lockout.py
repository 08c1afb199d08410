"""Failed API tokens are throttled: by the address they come from, and by the token's prefix.

Each bearer token that matches no working token counts one failure against its address, and
against its prefix when it has ours (`al_` and the next characters, the part the tokens page
shows). `AIRLOCK_API_TOKEN_FAILURES` failures within `AIRLOCK_API_TOKEN_WINDOW_S` lock that
address or prefix out for `AIRLOCK_API_TOKEN_LOCKOUT_S`: every bearer request from it answers
429 with Retry-After, a working token included, so guessing cannot go on at full speed from one
address nor spread over many against one token. The counters live in the shared cache (Redis when
configured), so every web process counts into the same ones.
"""

from __future__ import annotations

import math
import time

from django.conf import settings
from django.core.cache import cache

PREFIX_LENGTH = 10  # as stored in ApiToken.prefix


class LockedOut(Exception):
    """Too many failed tokens from this address or with this prefix; `retry_after` seconds to wait."""

    def __init__(self, retry_after: int, *, by: str) -> None:
        super().__init__(f"locked out by {by}")
        self.retry_after = retry_after
        self.by = by


def _limits() -> tuple[int, int, int]:
    return (int(getattr(settings, "AIRLOCK_API_TOKEN_FAILURES", 10)),
            int(getattr(settings, "AIRLOCK_API_TOKEN_WINDOW_S", 600)),
            int(getattr(settings, "AIRLOCK_API_TOKEN_LOCKOUT_S", 900)))


def _subjects(*, ip: str | None, token: str, token_prefix: str) -> list[tuple[str, str]]:
    subjects = [("address", ip or "unknown")]
    if token.startswith(token_prefix) and len(token) > PREFIX_LENGTH:
        subjects.append(("prefix", token[:PREFIX_LENGTH]))
    return subjects


def check(*, ip: str | None, token: str, token_prefix: str) -> None:
    """Raises LockedOut while the address or the token's prefix is locked out."""
    now = time.time()
    subjects = _subjects(ip=ip, token=token, token_prefix=token_prefix)
    kinds = {f"api-lock:{kind}:{value}": kind for kind, value in subjects}
    locks = cache.get_many(list(kinds))  # one round trip on every API request
    for key, kind in kinds.items():
        until = locks.get(key)
        if until is not None and until > now:
            raise LockedOut(max(1, math.ceil(until - now)), by=kind)


def note_failure(*, ip: str | None, token: str, token_prefix: str) -> None:
    """Counts a failed token; raises LockedOut when this failure reaches the limit."""
    failures, window, lockout = _limits()
    locked_by = ""
    for kind, value in _subjects(ip=ip, token=token, token_prefix=token_prefix):
        counter = f"api-fail:{kind}:{value}"
        cache.add(counter, 0, window)
        try:
            count = cache.incr(counter)
        except ValueError:  # expired between add and incr: this failure starts a new window
            cache.set(counter, count := 1, window)
        if count >= failures:
            cache.set(f"api-lock:{kind}:{value}", time.time() + lockout, lockout)
            cache.delete(counter)
            locked_by = locked_by or kind
    if locked_by:
        raise LockedOut(lockout, by=locked_by)
