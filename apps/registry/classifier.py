"""An optional second opinion on tool results: a pluggable injection classifier (a small model, a hosted
moderation endpoint, anything a company trusts), configured by `AIRLOCK_INJECTION_CLASSIFIER`.

It runs off the step path: each result a run reads is handed to a small thread pool and the run goes
on; only a *write* waits, before the policy point decides it, until every result its run has read so
far was judged (apps/runs/engine/second_opinion.py). A flagged result taints the run, so the write is
held (or denied) like any other in a tainted run; a classifier that fails or does not answer within
`AIRLOCK_INJECTION_CLASSIFIER_TIMEOUT_S` taints it too: it fails closed. The rule-based scanner
(apps/registry/scanner.py) and taint by provenance stay the first lines: this adds to them.

The callable takes the result's text and returns a score from 0 to 1 (or a bool); at
`AIRLOCK_INJECTION_CLASSIFIER_THRESHOLD` (0.5) or above the text is taken for an injection.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from importlib import import_module

from django.conf import settings

TEXT_CAP = 64 * 1024  # characters judged per result: a classifier's input is bounded like the scanner's


@dataclass(frozen=True)
class Verdict:
    flagged: bool
    score: float
    problem: str = ""  # the classifier failed: why (the run is tainted, failing closed)


@cache
def _classifier() -> Callable[[str], float | bool] | None:
    path = getattr(settings, "AIRLOCK_INJECTION_CLASSIFIER", "")
    if not path:
        return None
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


def configured() -> bool:
    return _classifier() is not None


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="injection-classifier")


def judge(text: str) -> Verdict:
    try:
        score = float(_classifier()(text[:TEXT_CAP]))
    except Exception as exc:  # a classifier's own failure: the run is tainted, not let through
        return Verdict(True, 1.0, f"the classifier failed ({type(exc).__name__})")
    return Verdict(score >= float(getattr(settings, "AIRLOCK_INJECTION_CLASSIFIER_THRESHOLD", 0.5)), score)


def submit(text: str) -> Future:
    return _pool().submit(judge, text)


def timeout_s() -> float:
    return float(getattr(settings, "AIRLOCK_INJECTION_CLASSIFIER_TIMEOUT_S", 10))
