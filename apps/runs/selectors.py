"""Tenant-scoped reads of runs, their step tree, ledger and events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet

from apps.core import tracing
from apps.core.errors import NotFound
from apps.runs.models import CallState, Run, RunEvent, RunStatus, RunStep, StepKind, ToolCall


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


def trace_parent(run_id: UUID | str) -> str:
    """The run's trace to join (apps/core/tracing.py), read only when tracing is on: the claim does not carry it."""
    if not tracing.enabled():
        return ""
    return Run.objects.filter(id=run_id).values_list("trace_parent", flat=True).first() or ""


def count_by_status() -> dict[str, int]:
    """Every organisation's runs by status (operators' metrics; every status present, 0 when none)."""
    counts = dict.fromkeys(RunStatus.values, 0)
    counts.update(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
    return counts


def get_run(*, org_id: UUID | str, run_id: UUID | str) -> Run:
    try:
        return Run.objects.get(org_id=org_id, id=run_id)
    except (Run.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such run.") from None


def run_tool_call(*, run: Run, tool_call_id: UUID | str) -> ToolCall:
    """One tool call of this run (so of its organisation), with its model call step. Raises NotFound."""
    try:
        return ToolCall.objects.select_related("step").get(run=run, id=tool_call_id)
    except (ToolCall.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such tool call in this run.") from None


def run_events(*, run: Run, after: int = 0, limit: int = 1000) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit]


def run_org_id(run_id: UUID | str) -> UUID | None:
    """The run's organisation, or None (a missing run and another organisation's look the same to a caller
    that then checks membership)."""
    try:
        return Run.objects.filter(id=run_id).values_list("org_id", flat=True).first()
    except (ValueError, ValidationError):
        return None


def last_event_seq(*, org_id: UUID | str, run_id: UUID | str) -> int | None:
    """The seq of the run's newest event (what its page was rendered up to, `?seq=`), or None for no such run of
    the organisation."""
    return Run.objects.filter(org_id=org_id, id=run_id).values_list("last_seq", flat=True).first()


def run_statuses(*, org_id: UUID | str, run_ids: list[str]) -> list[tuple[UUID, str]]:
    """(id, status) of those of `run_ids` that are the organisation's runs."""
    return list(Run.objects.filter(org_id=org_id, id__in=run_ids).values_list("id", "status"))


def events_after(*, run_id: UUID | str, after: int, limit: int = 1000) -> list[RunEvent]:
    """A run's events after seq `after`, oldest first (a run page's socket catching up)."""
    return list(RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit])


def latest_events(*, run: Run, limit: int = 100, upto: int | None = None) -> list[RunEvent]:
    """The run's newest `limit` events (up to seq `upto` when given), newest first (the run page's "Live events")."""
    events = RunEvent.objects.filter(run=run)
    if upto is not None:
        events = events.filter(seq__lte=upto)
    return list(events.order_by("-seq")[:limit])


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
    if state == CallState.UNKNOWN:
        rows = rows.filter(outcome_unknown=True)  # the same rows, as the inbox's index of them names them
    elif state:
        rows = rows.filter(state=state)
    if run_id:
        rows = rows.filter(run_id=run_id)
    return rows.order_by("-created_at", "-id")


def unknown_call_count(org_id: UUID | str) -> int:
    """Tool calls waiting for a person to say whether they happened (counted in the inbox badge)."""
    return ToolCall.objects.filter(org_id=org_id, outcome_unknown=True).count()


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
    return rows.order_by("created_at", "id")


@dataclass
class ModelCallView:
    step: RunStep
    calls: list[ToolCall] = field(default_factory=list)


@dataclass
class TurnView:
    step: RunStep
    model_calls: list[ModelCallView] = field(default_factory=list)
    context: list[RunEvent] = field(default_factory=list)  # its context resources: read or not available


CONTEXT_EVENTS = ("context.read", "context.unavailable")
SERVER_REQUEST_EVENTS = ("elicitation.requested", "elicitation.answered", "elicitation.expired", "sampling.held",
                         "sampling.completed", "sampling.refused", "sampling.requested", "sampling.expired",
                         # passed to (or refused for) the host of a gateway session: apps/gateway/relay.py
                         "elicitation.relayed", "elicitation.refused", "sampling.relayed")


@dataclass(frozen=True)
class RunRows:
    """A run's steps (by position), tool calls (in the ledger's order, with their approval requests) and the events
    its step tree shows (context resources and servers' questions, by seq), read once for everything the run page
    shows of them: the step tree, the waterfall and the spend per agent (apps/runs/page_read.py reads them with the
    rest)."""

    steps: list[RunStep]
    calls: list[ToolCall]
    events: list[RunEvent]


def run_rows(run: Run) -> RunRows:
    return RunRows(list(RunStep.objects.filter(run=run).order_by("position")),
                   list(ToolCall.objects.filter(run=run).select_related("approval")
                        .order_by("step__position", "position")),
                   list(RunEvent.objects.filter(run_id=run.id, type__in=CONTEXT_EVENTS + SERVER_REQUEST_EVENTS)
                        .order_by("seq")))


def run_tree(rows: RunRows) -> list[TurnView]:
    """Agent turns in order, each with the context resources its start read, its model calls and each call's
    ledger rows (`rows`: the run's, from `apps.runs.page_read`)."""
    calls: dict[Any, list[ToolCall]] = {}
    for row in rows.calls:
        calls.setdefault(row.step_id, []).append(row)
    turns = {s.id: TurnView(s) for s in rows.steps if s.kind == StepKind.AGENT}
    for s in rows.steps:
        if s.kind == StepKind.LLM and s.parent_id in turns:
            turns[s.parent_id].model_calls.append(ModelCallView(s, calls.get(s.id, [])))
    by_id = {str(step_id): turn for step_id, turn in turns.items()}
    for event in rows.events:
        if event.type in CONTEXT_EVENTS and (turn := by_id.get(str(event.data.get("step_id")))) is not None:
            turn.context.append(event)
    return list(turns.values())


def server_requests_by_call(rows: RunRows) -> dict[str, list[RunEvent]]:
    """What servers asked during the run's calls (elicitation and sampling events), by tool call id."""
    out: dict[str, list[RunEvent]] = {}
    for event in rows.events:
        if event.type in SERVER_REQUEST_EVENTS:
            out.setdefault(str(event.data.get("tool_call_id") or ""), []).append(event)
    return out
