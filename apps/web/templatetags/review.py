"""Durations on the run page's trace tree."""

from __future__ import annotations

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def step_duration(step) -> str:
    """A step's wall time ("1.2 s", "3 min 4 s"; "so far" while it runs; "" before it starts)."""
    started, finished = getattr(step, "started_at", None), getattr(step, "finished_at", None)
    if not started:
        return ""
    seconds = ((finished or timezone.now()) - started).total_seconds()
    text = f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return text if finished else f"{text} so far"
