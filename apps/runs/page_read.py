"""What the run page shows of a run: the run, its steps and tool calls (with their approval requests), the events
its step tree shows (context resources, servers' questions) and its newest events.

Two doors to the same read. `run_page_plain` is the ORM's: six queries one after the other, each compiled anew,
about half of the CPU of a live panel render (~7.5 ms for a short run), which each web process makes for every
open run page each time its run moves (bench/load.py, issue 33). `run_page` sends six statements built once per
process (apps/core/rows.py) in one round trip. Each is filtered by the organisation as the ORM's are. The tests
hold the two doors to the same page (tests/runs/test_run_page_read.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError

from apps.approvals.models import ApprovalRequest
from apps.core.errors import NotFound
from apps.core.rows import Columns, fetch_together, split
from apps.runs import selectors
from apps.runs.models import Run, RunEvent, RunStep, ToolCall
from apps.runs.selectors import RunRows

TREE_EVENTS = selectors.CONTEXT_EVENTS + selectors.SERVER_REQUEST_EVENTS


@dataclass(frozen=True)
class RunPage:
    run: Run
    rows: RunRows
    latest_events: list[RunEvent]  # newest first


def run_page_plain(*, org_id: UUID | str, run_id: UUID | str, events_shown: int,
                   events_upto: int | None = None) -> RunPage:
    """The run and what its page shows of it; its newest `events_shown` events, up to seq `events_upto` when given.
    Raises NotFound for a run that is not the organisation's."""
    run = selectors.get_run(org_id=org_id, run_id=run_id)
    return RunPage(run, selectors.run_rows(run),
                   selectors.latest_events(run=run, limit=events_shown, upto=events_upto))


def run_page(*, org_id: UUID | str, run_id: UUID | str, events_shown: int, events_upto: int | None = None) -> RunPage:
    """`run_page_plain`'s page, read in one round trip of prebuilt statements (see the module's docstring)."""
    reads = _reads()
    try:
        run_key, org_key = reads.run.param("id", run_id), reads.run.param("org", org_id)
    except (ValueError, ValidationError):
        raise NotFound("No such run.") from None
    latest = reads.latest_upto if events_upto is not None else reads.latest
    found_run, steps, calls, tree_events, latest_events = fetch_together([
        (reads.by_run, [org_key, run_key]),
        (reads.steps, [org_key, run_key]),
        (reads.calls, [org_key, run_key]),
        (reads.tree_events, [run_key, *TREE_EVENTS, org_key]),
        (latest, [run_key, org_key, *([events_upto] if events_upto is not None else []), events_shown]),
    ])
    if not found_run:
        raise NotFound("No such run.")
    run = reads.run.instance(found_run[0])
    rows = RunRows([reads.step.instance(row) for row in steps], [reads.call_with_approval(row) for row in calls],
                   [reads.event.instance(row) for row in tree_events])
    return RunPage(run, rows, [reads.event.instance(row) for row in latest_events])


class _Reads:
    """The statements, built once per process (`_reads`)."""

    def __init__(self) -> None:
        self.run, self.step = Columns.every(Run, "r"), Columns.every(RunStep, "s")
        self.call, self.request = Columns.every(ToolCall, "t"), Columns.every(ApprovalRequest, "a")
        self.event = Columns.every(RunEvent, "e")
        self._approval = ToolCall._meta.get_field("approval")
        run, step, call, request, event = self.run, self.step, self.call, self.request, self.event
        # An event has no organisation of its own: its run's.
        owned = f"EXISTS (SELECT 1 FROM {run.table} o WHERE o.id = e.run_id AND o.org_id = %s)"  # noqa: S608
        self.by_run = f"SELECT {run.sql} FROM {run.table} r WHERE r.org_id = %s AND r.id = %s"  # noqa: S608
        self.steps = (f"SELECT {step.sql} FROM {step.table} s "  # noqa: S608 (column names only)
                      "WHERE s.org_id = %s AND s.run_id = %s ORDER BY s.position")
        self.calls = (f"SELECT {call.sql}, {request.sql} FROM {call.table} t "  # noqa: S608
                      f"JOIN {step.table} s ON s.id = t.step_id LEFT JOIN {request.table} a ON a.id = t.approval_id "
                      "WHERE t.org_id = %s AND t.run_id = %s ORDER BY s.position, t.position")
        self.tree_events = (f"SELECT {event.sql} FROM {event.table} e WHERE e.run_id = %s "  # noqa: S608
                            f"AND e.type IN ({', '.join(['%s'] * len(TREE_EVENTS))}) AND {owned} ORDER BY e.seq")
        newest = f"SELECT {event.sql} FROM {event.table} e WHERE e.run_id = %s AND {owned}"  # noqa: S608
        self.latest = f"{newest} ORDER BY e.seq DESC LIMIT %s"
        self.latest_upto = f"{newest} AND e.seq <= %s ORDER BY e.seq DESC LIMIT %s"

    def call_with_approval(self, row: Any) -> ToolCall:
        """A ledger row with its approval request (or None) loaded, as `select_related("approval")` leaves it."""
        call_part, request_part = split(row, self.call, self.request)
        call = self.call.instance(call_part)
        self._approval.set_cached_value(call, self.request.instance(request_part) if call.approval_id else None)
        return call


@functools.cache
def _reads() -> _Reads:
    return _Reads()
