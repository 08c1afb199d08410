"""The tool result both sides of the comparison return: 2 KB of text that does not compress (standard library only:
bench/langgraph_side.py imports it from the bench venv, bench/lookup_server.py from the project's)."""

from __future__ import annotations

import random
import string

RESULT_BYTES = 2048
_ALPHABET = string.ascii_letters + string.digits + " "


def lookup_result(n: int, size: int = RESULT_BYTES) -> str:
    """Deterministic per `n`, and random enough that Postgres's TOAST compression cannot shrink it."""
    rng = random.Random(n)
    return "".join(rng.choice(_ALPHABET) for _ in range(size))
