"""What a run's actions came to, beside what its agents said (the design brief: only real tool calls count as
actions). A run whose write failed, was rejected, denied or expired, or whose outcome is unknown, carries
those calls in `Run.attention`, whatever its status and whatever its agents answered (`STATUS: done`
included): shown in the runs list (filterable), the run's header, the API and the `run.finished` webhook."""

from __future__ import annotations

import functools
from typing import Any
from uuid import UUID

from apps.audit.redaction import redact
from apps.core.rows import Columns, fetch
from apps.runs.models import CallState, ToolCall

NOT_DONE = (CallState.FAILED, CallState.REJECTED, CallState.EXPIRED, CallState.DENIED, CallState.UNKNOWN)
LABELS = {CallState.FAILED: "failed", CallState.REJECTED: "rejected", CallState.EXPIRED: "expired unapproved",
          CallState.DENIED: "denied by policy", CallState.UNKNOWN: "with an unknown outcome"}
REASON_CAP = 300


def writes_not_done(*, run_id: UUID | str, tools: dict[str, Any]) -> list[dict[str, str]]:
    """The run's calls of tools that change something (risk `write` or `dangerous` in the run's snapshot)
    that did not go through, in the order they were made. Reads are not actions: a failed lookup is left out."""
    return writes_not_done_from(fetch(*not_done_statement(run_id)), tools=tools)


def not_done_statement(run_id: UUID | str) -> tuple[str, list[Any]]:
    """The read behind `writes_not_done`, to send with others (apps.core.rows.fetch_together)."""
    calls, sql = _not_done_read()
    return sql, [calls.param("run", run_id), *NOT_DONE]


def writes_not_done_from(rows: list[tuple], *, tools: dict[str, Any]) -> list[dict[str, str]]:
    """`writes_not_done` of the rows `not_done_statement` read."""
    calls = _not_done_read()[0]
    found = [dict(zip(calls.attnames, calls.values(row), strict=True)) for row in rows]
    return [{"tool_call_id": str(call["id"]), "tool": call["qualified_name"], "state": call["state"],
             "reason": redact((call["error"] or call["reason"])[:REASON_CAP])}
            for call in found if (tools.get(call["qualified_name"]) or {}).get("risk", "read") != "read"]


@functools.cache
def _not_done_read() -> tuple[Columns, str]:
    calls = Columns(ToolCall, ["id", "qualified_name", "state", "error", "reason"], "t")
    states = ", ".join(["%s"] * len(NOT_DONE))
    return calls, (f"SELECT {calls.sql} FROM {calls.table} t WHERE t.run_id = %s AND t.state IN ({states}) "  # noqa: S608
                   "ORDER BY t.created_at, t.position")


def summary(attention: list[dict[str, Any]]) -> str:
    """ "1 write failed, 2 rejected" ("" for none), in the order of LABELS."""
    counts = {state: sum(1 for item in attention if item.get("state") == state) for state in LABELS}
    parts = [f"{n} {LABELS[state]}" for state, n in counts.items() if n]
    if not parts:
        return ""
    first = parts[0].split(" ", 1)
    parts[0] = f"{first[0]} write{'' if first[0] == '1' else 's'} {first[1]}"
    return ", ".join(parts)
