"""What the inbox shows about each item's run (task, last steps, findings, taint), read for a page of items at
once: a query per table instead of several per item."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from apps.runs import selectors
from apps.runs.models import Run, ToolCall

LAST_STEPS = 5


def run_summaries(requests: Iterable[Any]) -> dict[Any, dict[str, Any] | None]:
    """request id -> the summary `web.views.inbox.run_summary` makes for one (None: no run)."""
    requests = list(requests)
    run_ids = {r.run_id for r in requests if r.run_id}
    if not run_ids:
        return {r.id: None for r in requests}
    org_ids = {r.org_id for r in requests}
    found = {run.id: run for run in Run.objects.filter(org_id__in=org_ids, id__in=run_ids).defer("snapshot", "state")}
    ledgers: dict[Any, list[ToolCall]] = defaultdict(list)
    for row in (ToolCall.objects.filter(run_id__in=found).select_related("step")
                .defer("result", "arguments", "approved_arguments").order_by("run_id", "step__position", "position")):
        ledgers[row.run_id].append(row)
    out: dict[Any, dict[str, Any] | None] = {}
    for request in requests:
        run = found.get(request.run_id)
        if run is None:
            out[request.id] = None
            continue
        ledger = ledgers.get(run.id, [])
        out[request.id] = {"run": run, "last_steps": ledger[-LAST_STEPS:],
                           "findings": [f for row in ledger for f in (row.findings or [])], "tainted": run.tainted,
                           "taint": selectors.taint_origin(run)}
    return out
