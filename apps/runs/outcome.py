"""What a run's actions came to, beside what its agents said (the design brief: only real tool calls count as
actions). A run whose write failed, was rejected, denied or expired, or whose outcome is unknown, carries
those calls in `Run.attention`, whatever its status and whatever its agents answered (`STATUS: done`
included): shown in the runs list (filterable), the run's header, the API and the `run.finished` webhook."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from apps.audit.redaction import redact
from apps.runs.models import CallState, ToolCall

NOT_DONE = (CallState.FAILED, CallState.REJECTED, CallState.EXPIRED, CallState.DENIED, CallState.UNKNOWN)
LABELS = {CallState.FAILED: "failed", CallState.REJECTED: "rejected", CallState.EXPIRED: "expired unapproved",
          CallState.DENIED: "denied by policy", CallState.UNKNOWN: "with an unknown outcome"}
REASON_CAP = 300


def writes_not_done(*, run_id: UUID | str, tools: dict[str, Any]) -> list[dict[str, str]]:
    """The run's calls of tools that change something (risk `write` or `dangerous` in the run's snapshot)
    that did not go through, in the order they were made. Reads are not actions: a failed lookup is left out."""
    rows = (ToolCall.objects.filter(run_id=run_id, state__in=NOT_DONE).order_by("created_at", "position")
            .values_list("id", "qualified_name", "state", "error", "reason"))
    return [{"tool_call_id": str(pk), "tool": name, "state": state, "reason": redact((error or reason)[:REASON_CAP])}
            for pk, name, state, error, reason in rows if (tools.get(name) or {}).get("risk", "read") != "read"]


def summary(attention: list[dict[str, Any]]) -> str:
    """ "1 write failed, 2 rejected" ("" for none), in the order of LABELS."""
    counts = {state: sum(1 for item in attention if item.get("state") == state) for state in LABELS}
    parts = [f"{n} {LABELS[state]}" for state, n in counts.items() if n]
    if not parts:
        return ""
    first = parts[0].split(" ", 1)
    parts[0] = f"{first[0]} write{'' if first[0] == '1' else 's'} {first[1]}"
    return ", ".join(parts)
