"""How the engine classifies what went wrong: transient (retry with backoff), validation,
business, permission; and the exceptions that stop a run."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UnexpectedModelBehavior, UserError

from apps.core.egress import EgressRefused

T = TypeVar("T")
RETRY_ATTEMPTS = 3
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0


class StopRun(Exception):
    """Ends the run with `status` and a reason people read."""

    def __init__(self, status: str, message: str, error_class: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.error_class = status, message, error_class


class LeaseLost(Exception):
    """Another worker owns this run now: stop touching it."""


def classify_model_error(exc: BaseException) -> str:
    if egress_refusal(exc) is not None:  # an SDK may wrap it as a connection error; asking again cannot help
        return "permission"
    if isinstance(exc, ModelHTTPError):
        if exc.status_code in (408, 409, 425, 429) or exc.status_code >= 500:
            return "transient"
        if exc.status_code in (401, 403):
            return "permission"
        return "validation"
    if isinstance(exc, ModelAPIError | TimeoutError | ConnectionError):
        return "transient"
    if isinstance(exc, UnexpectedModelBehavior | UserError | ValueError):
        return "validation"
    return "internal"


def egress_refusal(exc: BaseException) -> EgressRefused | None:
    """The egress guard's refusal behind `exc` (an SDK's "Connection error." hides it), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EgressRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with full jitter: attempt 1 -> up to 0.5 s, 2 -> 1 s, ... capped."""
    return random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)))


def with_retries(call: Callable[[], T], *, classify: Callable[[BaseException], str],
                 on_retry: Callable[[int, float, BaseException], None], attempts: int = RETRY_ATTEMPTS) -> T:
    """Calls `call`, retrying transient failures (bounded). Re-raises the last error."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if classify(exc) != "transient" or attempt == attempts:
                raise
            delay = backoff_delay(attempt)
            on_retry(attempt, delay, exc)
            time.sleep(delay)
    raise AssertionError("unreachable")
