"""The statistics every bench script prints: a nearest-rank quantile and a median/min/p95 summary."""

from __future__ import annotations

import statistics


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (q in 0..1) of `values`; NaN when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def summary(values: list[float], digits: int = 3) -> dict:
    """n, median, min and p95, rounded to `digits`; just n when there are no values."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "p95": round(quantile(values, 0.95), digits)}
