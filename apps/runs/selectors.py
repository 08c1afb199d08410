"""Tenant-scoped reads of runs, their step tree, ledger and events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from apps.core.errors import NotFound
from apps.runs.models import CallState, Run, RunEvent, RunStep, StepKind, ToolCall


def org_runs(*, org_id: UUID | str, status: str | None = None, crew_id: UUID | str | None = None,
             agent_id: UUID | str | None = None, since: datetime | None = None,
             until: datetime | None = None, attention: bool | None = None) -> QuerySet[Run]:
    """`attention`: only runs whose writes did not all go through (True), or only the others (False)."""
    runs = Run.objects.filter(org_id=org_id).defer("snapshot", "state")
    if attention is not None:
        runs = runs.exclude(attention=[]) if attention else runs.filter(attention=[])
    if status:
        runs = runs.filter(status=status)
    if crew_id:
        runs = runs.filter(crew_id=crew_id)
    if agent_id:
        runs = runs.filter(Q(steps__agent_id=agent_id)).distinct()
    if since:
        runs = runs.filter(created_at__gte=since)
    if until:
        runs = runs.filter(created_at__lt=until)
    return runs.order_by("-created_at")


def get_run(*, org_id: UUID | str, run_id: UUID | str) -> Run:
    try:
        return Run.objects.get(org_id=org_id, id=run_id)
    except (Run.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such run.") from None


def run_events(*, run: Run, after: int = 0, limit: int = 1000) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit]


def run_ledger(run: Run) -> QuerySet[ToolCall]:
    return ToolCall.objects.filter(run=run).select_related("step", "approval").order_by("step__position", "position")


@dataclass(frozen=True)
class TaintOrigin:
    """What tainted a run: the reason, and the result that did it (shown to whoever reviews a held call)."""

    reason: str
    tool: str
    call: ToolCall | None

    @property
    def excerpt(self) -> str:
        text = ((self.call.result or {}).get("text", "") if self.call is not None else "") or ""
        return text[:TAINT_EXCERPT] + ("…" if len(text) > TAINT_EXCERPT else "")


TAINT_EXCERPT = 600


def taint_origin(run: Run) -> TaintOrigin | None:
    """The first `run.tainted` event of a tainted run, with the tool call whose result it names."""
    if not run.tainted:
        return None
    event = RunEvent.objects.filter(run=run, type="run.tainted").order_by("seq").first()
    if event is None:
        return None
    call_id = event.data.get("tool_call_id") or None
    call = ToolCall.objects.filter(run=run, id=call_id).first() if call_id else None
    return TaintOrigin(reason=event.data.get("reason", ""), tool=event.data.get("tool", ""), call=call)


def get_tool_call(*, org_id: UUID | str, tool_call_id: UUID | str) -> ToolCall:
    try:
        return ToolCall.objects.select_related("run").get(org_id=org_id, id=tool_call_id)
    except (ToolCall.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such tool call.") from None


def org_tool_calls(*, org_id: UUID | str, state: str | None = None,
                   run_id: UUID | str | None = None) -> QuerySet[ToolCall]:
    """The organisation's ledger rows, newest first, optionally in one state (e.g. `unknown`: a call
    a worker sent and never heard back about, waiting for a person to say whether it happened)."""
    rows = ToolCall.objects.filter(org_id=org_id).select_related("run").defer("run__snapshot", "run__state")
    if state:
        rows = rows.filter(state=state)
    if run_id:
        rows = rows.filter(run_id=run_id)
    return rows.order_by("-created_at", "-id")


def unknown_call_count(org_id: UUID | str) -> int:
    """Tool calls waiting for a person to say whether they happened (counted in the inbox badge)."""
    return ToolCall.objects.filter(org_id=org_id, state=CallState.UNKNOWN).count()


def unknown_calls(*, org_id: UUID | str, crew_id: UUID | str | None = None, agent_id: UUID | str | None = None,
                  server_id: UUID | str | None = None, risk: str | None = None) -> QuerySet[ToolCall]:
    """Calls whose outcome is unknown, oldest first, with the inbox's filters (the run's crew, the agent
    that asked, the tool's server and risk). A person resolves each: `decisions.resolve_unknown_call`."""
    rows = org_tool_calls(org_id=org_id, state=CallState.UNKNOWN).select_related("step", "tool")
    if crew_id:
        rows = rows.filter(run__crew_id=crew_id)
    if agent_id:
        rows = rows.filter(step__agent_id=agent_id)
    if server_id:
        rows = rows.filter(tool__server_id=server_id)
    if risk:
        rows = rows.filter(tool__risk=risk)
    return rows.defer("step__messages").order_by("created_at", "id")


@dataclass
class ModelCallView:
    step: RunStep
    calls: list[ToolCall] = field(default_factory=list)


@dataclass
class TurnView:
    step: RunStep
    model_calls: list[ModelCallView] = field(default_factory=list)


def run_tree(run: Run) -> list[TurnView]:
    """Agent turns in order, each with its model calls and each call's ledger rows."""
    steps = list(RunStep.objects.filter(run=run).defer("messages").order_by("position"))
    calls: dict[Any, list[ToolCall]] = {}
    for row in ToolCall.objects.filter(run=run).select_related("approval").order_by("position"):
        calls.setdefault(row.step_id, []).append(row)
    turns = {s.id: TurnView(s) for s in steps if s.kind == StepKind.AGENT}
    for s in steps:
        if s.kind == StepKind.LLM and s.parent_id in turns:
            turns[s.parent_id].model_calls.append(ModelCallView(s, calls.get(s.id, [])))
    return list(turns.values())
