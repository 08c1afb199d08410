"""Run history: searching runs, what a run spent and when, its configuration against today's, its trace.

Reads only (tenant-scoped like `selectors`). The queries are designed with the indexes in
migration 0003: the list pages by (org, created_at) and filters with small partial indexes;
full-text search uses a GIN index on Postgres (`SEARCH_DOCUMENT`) and `icontains` on SQLite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
)
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from apps.approvals.models import ApprovalRequest
from apps.audit.redaction import redact
from apps.runs.messages import conversations
from apps.runs.models import Run, RunEvent, RunStep, StepKind, ToolCall
from apps.runs.selectors import RunRows

# Must match the GIN index expression in migration 0003 for Postgres to use it.
SEARCH_DOCUMENT = "to_tsvector('simple'::regconfig, coalesce(\"runs_run\".\"output\", '') || ' ' || " \
                  "\"runs_run\".\"inputs\"::text)"
# Cost and tokens sort ended runs by their final figures; runs still going (whose figures move at every model call)
# and runs with a call of unknown price come after them, newest first.
SORTS = {"newest": ("-created_at",), "oldest": ("created_at",),
         "cost": (F("final_cost_usd").desc(nulls_last=True), "-created_at"),
         "tokens": (F("final_tokens_in").desc(nulls_last=True), "-created_at"), "status": ("status", "-created_at")}


@dataclass(frozen=True)
class RunFilters:
    crew_id: UUID | str | None = None
    agent_id: UUID | str | None = None
    status: str | None = None
    started_by: int | None = None  # a user id
    since: datetime | None = None
    until: datetime | None = None
    held: bool = False  # has calls held for a person
    findings: bool = False  # has tool results with scanner findings
    attention: bool = False  # has writes that did not go through (apps/runs/outcome.py)
    q: str = ""  # full text over inputs and output
    sort: str = "newest"


def search_runs(*, org_id: UUID | str, filters: RunFilters) -> QuerySet[Run]:
    runs = Run.objects.filter(org_id=org_id).defer("snapshot", "state")
    if filters.status:
        runs = runs.filter(status=filters.status)
    if filters.crew_id:
        runs = runs.filter(crew_id=filters.crew_id)
    if filters.started_by:
        runs = runs.filter(started_by_id=filters.started_by)
    if filters.since:
        runs = runs.filter(created_at__gte=filters.since)
    if filters.until:
        runs = runs.filter(created_at__lt=filters.until)
    if filters.agent_id:
        runs = runs.filter(Exists(RunStep.objects.filter(run=OuterRef("pk"), kind=StepKind.AGENT,
                                                         agent_id=filters.agent_id)))
    if filters.held:
        runs = runs.filter(Exists(ToolCall.objects.filter(run=OuterRef("pk"), approval__isnull=False)))
    if filters.findings:
        runs = runs.filter(Exists(ToolCall.objects.filter(run=OuterRef("pk")).exclude(findings=[])))
    if filters.attention:
        runs = runs.exclude(attention=[])
    if filters.q.strip():
        runs = _text_search(runs, filters.q.strip())
    return runs.order_by(*SORTS.get(filters.sort, SORTS["newest"]))


def _text_search(runs: QuerySet[Run], q: str) -> QuerySet[Run]:
    if connection.vendor == "postgresql":
        # A constant expression with q as a bound parameter; it must match the index expression.
        match = RawSQL(f"{SEARCH_DOCUMENT} @@ plainto_tsquery('simple'::regconfig, %s)", [q],  # noqa: S611
                       output_field=BooleanField())
        return _few_first(runs, runs.filter(match))
    return runs.filter(Q(output__icontains=q) | Q(inputs__icontains=q))


FEW_MATCHES = 1_000


def _few_first(runs: QuerySet[Run], matching: QuerySet[Run]) -> QuerySet[Run]:
    """`matching`, as the ids of its runs when there are at most FEW_MATCHES of them.

    Postgres guesses how many runs a text search matches; asked for the newest page of matches, it walks the
    newest runs and tests each, which is quick for a common word and reads every run of the organisation for a
    rare one (an order id, an email: what people search for), 3.5 s at a million runs. Asked for some matching
    ids in any order, it uses the text index for a rare word and stops early for a common one. When that is all
    of them, the page is those runs, sorted; when there are more, the word is common and the walk is quick."""
    few = list(matching.order_by().values_list("pk", flat=True)[:FEW_MATCHES + 1])
    return runs.filter(pk__in=few) if len(few) <= FEW_MATCHES else matching


def count_runs(runs: QuerySet[Run], *, cap: int = 1_000) -> tuple[int, bool]:
    """How many runs match, counted up to `cap` ("1000+"): an exact count of a rare filter (has held
    calls) over 100k runs walks them all (bench/history.py)."""
    found = runs.order_by().values("pk")[:cap + 1].count()
    return min(found, cap), found > cap


# --- one run -------------------------------------------------------------------------------------

@dataclass
class Bar:
    label: str
    kind: str  # agent / llm / tool
    start_ms: int
    duration_ms: int
    detail: str = ""
    x: float = 0.0  # percent of the run's duration, for the SVG waterfall
    width: float = 0.0


@dataclass
class Waterfall:
    total_ms: int
    bars: list[Bar] = field(default_factory=list)

    @property
    def height(self) -> int:
        return len(self.bars) * 22 + 4


def waterfall(run: Run, rows: RunRows) -> Waterfall:
    """Each agent turn, model call and tool call as a bar from the run's start (a latency timeline)."""
    origin = run.started_at or run.created_at
    bars: list[Bar] = []

    def bar(label: str, kind: str, start: datetime | None, end: datetime | None, detail: str = "") -> None:
        if start is None:
            return
        end = end or start
        bars.append(Bar(label, kind, max(0, _ms(start - origin)), max(0, _ms(end - start)), detail))

    for step in rows.steps:
        if step.kind == StepKind.AGENT:
            bar(f"{step.agent_name} · {step.task}", "agent", step.started_at, step.finished_at, step.status)
        else:
            bar(f"{step.model}", "llm", step.started_at, step.finished_at,
                f"{step.input_tokens} in / {step.output_tokens} out")
    for call in rows.calls:
        bar(call.qualified_name, "tool", call.dispatched_at or call.decided_at or call.created_at,
            call.finished_at, call.state)
    bars.sort(key=lambda b: (b.start_ms, b.kind != "agent"))
    total = max([b.start_ms + b.duration_ms for b in bars] + [1])
    for b in bars:
        b.x = round(b.start_ms * 100 / total, 2)
        b.width = max(round(b.duration_ms * 100 / total, 2), 0.4)
    return Waterfall(total, bars)


def _ms(delta: Any) -> int:
    return int(delta.total_seconds() * 1000)


@dataclass(frozen=True)
class AgentSpend:
    agent_id: str
    agent_name: str
    calls: int
    tokens_in: int
    tokens_out: int
    tokens_cached: int
    cost_usd: Decimal | None  # None: some of its calls had no known price
    unknown_calls: int


def spend_by_agent(rows: RunRows) -> list[AgentSpend]:
    """The run's model calls summed per agent."""
    by_agent: dict[str, dict[str, Any]] = {}
    for step in rows.steps:
        if step.kind != StepKind.LLM:
            continue
        row = by_agent.setdefault(str(step.agent_id), {"name": step.agent_name, "calls": 0, "in": 0, "out": 0,
                                                       "cached": 0, "cost": Decimal(0), "unknown": 0})
        row["calls"] += 1
        row["in"] += step.input_tokens
        row["out"] += step.output_tokens
        row["cached"] += step.cached_tokens
        if step.cost_usd is None:
            row["unknown"] += 1
        else:
            row["cost"] += step.cost_usd
    return [AgentSpend(agent_id=k, agent_name=r["name"], calls=r["calls"], tokens_in=r["in"], tokens_out=r["out"],
                       tokens_cached=r["cached"], cost_usd=None if r["unknown"] else r["cost"],
                       unknown_calls=r["unknown"]) for k, r in by_agent.items()]


# --- configuration then and now ------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    path: str
    then: Any
    now: Any

    @property
    def kind(self) -> str:
        return "added" if self.then is None else "removed" if self.now is None else "changed"


def mask(value: Any) -> Any:
    """What traces, exports and the configuration diff show: `apps.audit.redaction.redact`, which masks
    secrets by key and by shape and the deployment's configured sensitive argument names."""
    return redact(value)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value, key=str):
            out.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out or ({prefix: {}} if prefix else {})
    return {prefix: value}


def config_diff(then: dict[str, Any], now: dict[str, Any] | None) -> list[Change]:
    """What differs between the snapshot a run used and what it would use today (redacted), by path.

    Agents and tools are keyed by id and qualified name, so a renamed prompt or a new grant shows
    as one line each. `now` None: the crew no longer exists.
    """
    if now is None:
        return []
    a, b = _flatten(mask(_comparable(then))), _flatten(mask(_comparable(now)))
    return [Change(path, a.get(path), b.get(path)) for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)]


def _comparable(snapshot: dict[str, Any]) -> dict[str, Any]:
    snap = dict(snapshot or {})
    agents = {}
    for key, agent in (snap.get("agents") or {}).items():
        agent = dict(agent)
        agent["grants"] = {g.get("tool", str(i)): g for i, g in enumerate(agent.get("grants") or [])}
        agents[agent.get("name", key)] = agent
    snap["agents"] = agents
    return snap


# --- the full trace (JSON export) ----------------------------------------------------------------

def run_trace(run: Run) -> dict[str, Any]:
    """Everything a run did, redacted: the run, its steps (with model messages), ledger and events."""
    rows = list(RunStep.objects.filter(run=run).order_by("position"))
    talk = conversations(s.id for s in rows if s.kind == StepKind.AGENT)
    steps = [{"id": str(s.id), "parent_id": str(s.parent_id) if s.parent_id else None, "position": s.position,
              "kind": s.kind, "agent_id": str(s.agent_id) if s.agent_id else None, "agent": s.agent_name,
              "task": s.task, "status": s.status, "status_reason": s.status_reason, "output": s.output,
              "provider": s.provider, "model": s.model, "input_tokens": s.input_tokens,
              "cached_tokens": s.cached_tokens, "output_tokens": s.output_tokens,
              "cost_usd": _dec(s.cost_usd), "price_source": s.price_source, "latency_ms": s.latency_ms,
              "started_at": _iso(s.started_at), "finished_at": _iso(s.finished_at),
              "messages": talk.get(str(s.id))}
             for s in rows]
    calls = [{"id": str(c.id), "step_id": str(c.step_id), "call_id": c.call_id, "tool": c.qualified_name,
              "arguments": c.arguments, "approved_arguments": c.approved_arguments, "state": c.state,
              "decision": c.decision, "rule": c.rule, "reason": c.reason,
              "decided_by": decided_by(c), "result": c.result, "error": c.error, "findings": c.findings,
              "decided_at": _iso(c.decided_at), "dispatched_at": _iso(c.dispatched_at),
              "finished_at": _iso(c.finished_at)}
             for c in ToolCall.objects.filter(run=run).select_related("approval").order_by("step__position",
                                                                                            "position")]
    events = [{"seq": e.seq, "type": e.type, "at": _iso(e.at), "data": e.data}
              for e in RunEvent.objects.filter(run=run).order_by("seq").iterator(chunk_size=2000)]
    body = {"run": {"id": str(run.id), "crew_id": str(run.crew_id) if run.crew_id else None,
                    "crew": run.crew_name, "status": run.status, "inputs": run.inputs, "output": run.output,
                    "error": run.error, "error_class": run.error_class, "started_by": run.started_by_label,
                    "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
                    "finished_at": _iso(run.finished_at), "tokens_in": run.tokens_in, "tokens_out": run.tokens_out,
                    "tokens_cached": run.tokens_cached, "cost_usd": _dec(run.cost_usd),
                    "cost_unknown_calls": run.cost_unknown_calls, "snapshot": run.snapshot},
            "steps": steps, "tool_calls": calls, "events": events}
    return mask_values(mask(body), secret_values(run.inputs, *(c["arguments"] for c in calls)))


def secret_values(*documents: Any) -> set[str]:
    """Values that redaction masks by their key (a card number under `card_number`), to mask them again
    wherever they were copied into text: the prompt that quoted the inputs, a model's message."""
    found: set[str] = set()

    def walk(original: Any, masked: Any) -> None:
        if isinstance(original, dict) and isinstance(masked, dict):
            for key, value in original.items():
                walk(value, masked.get(key))
        elif isinstance(original, list) and isinstance(masked, list):
            for a, b in zip(original, masked, strict=False):
                walk(a, b)
        elif original != masked and isinstance(original, str | int) and len(str(original)) >= 4:
            found.add(str(original))

    for document in documents:
        walk(document, redact(document))
    return found


def mask_values(value: Any, secrets: set[str]) -> Any:
    if not secrets:
        return value
    if isinstance(value, dict):
        return {k: mask_values(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_values(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "[redacted]")
    return value


def decided_by(call: ToolCall) -> str:
    """Who made the call's decision: the policy rule, or the person who approved or rejected it."""
    approval = call.approval if call.approval_id else None
    if approval is not None and approval.decided_by_label:
        return approval.decided_by_label
    if call.resolved_by:
        return call.resolved_by
    return f"policy ({call.rule})" if call.rule else ("policy" if call.decision else "")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _dec(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


# --- what the costs page shows next to the spend -------------------------------------------------

def top_runs(*, org_id: UUID | str, since: datetime, until: datetime, limit: int = 10) -> QuerySet[Run]:
    return (Run.objects.filter(org_id=org_id, created_at__gte=since, created_at__lt=until, cost_usd__gt=0)
            .only("id", "crew_name", "status", "cost_usd", "tokens_in", "tokens_out", "created_at",
                  "cost_unknown_calls").order_by(*SORTS["cost"])[:limit])  # run_org_cost's order, read in order


@dataclass(frozen=True)
class Outcomes:
    succeeded: int
    cost_usd: Decimal | None  # known spend of the succeeded runs
    unknown_runs: int  # succeeded runs with a call of unknown price (not in cost_usd)

    @property
    def per_run(self) -> Decimal | None:
        known = self.succeeded - self.unknown_runs
        return (self.cost_usd / known).quantize(Decimal("0.000001")) if known and self.cost_usd is not None else None


def successful_run_cost(*, org_id: UUID | str, since: datetime, until: datetime) -> Outcomes:
    runs = Run.objects.filter(org_id=org_id, created_at__gte=since, created_at__lt=until, status="succeeded")
    # count(*) and the final cost only (a succeeded run's cost): an index-only scan of run_org_status, which
    # includes it on Postgres
    totals = runs.aggregate(n=Count("*"), priced=Count("final_cost_usd"), cost=Sum("final_cost_usd"))
    return Outcomes(succeeded=totals["n"], cost_usd=totals["cost"], unknown_runs=totals["n"] - totals["priced"])


@dataclass(frozen=True)
class Waiting:
    crew: str
    approvals: int
    seconds: float

    @property
    def hours(self) -> float:
        return round(self.seconds / 3600, 2)


def approval_waits(*, org_id: UUID | str, since: datetime, until: datetime,
                   now: datetime | None = None) -> list[Waiting]:
    """Time runs spent waiting for people (request to decision; still pending: to now), per crew."""
    now = now or timezone.now()
    # The crew's name as the request recorded it when the run asked (its context, written by the runs' ledger and
    # engine); the run's own row only for a request that has none, since reading each request's run is an index
    # lookup per request (108 ms for the month at a million runs, bench/history.py).
    crew_of = Coalesce(KT("context__crew"),
                       Subquery(Run.objects.filter(id=OuterRef("run_id")).order_by().values("crew_name")[:1]),
                       output_field=TextField())
    waited = Greatest(ExpressionWrapper(Coalesce("decided_at", Value(now)) - F("created_at"),
                                        output_field=DurationField()), Value(timedelta(0)))
    rows = (ApprovalRequest.objects.filter(org_id=org_id, created_at__gte=since, created_at__lt=until,
                                           run_id__isnull=False)
            .annotate(crew=crew_of).values("crew").annotate(n=Count("id"), waited=Sum(waited)).order_by())
    totals: dict[str, list[float]] = {}
    for row in rows:  # one row per crew; a deleted crew's runs are gone, so their approvals share one row
        entry = totals.setdefault(row["crew"] or "(deleted crew)", [0, 0.0])
        entry[0] += row["n"]
        entry[1] += row["waited"].total_seconds() if row["waited"] else 0.0
    return sorted((Waiting(c, int(n), s) for c, (n, s) in totals.items()), key=lambda w: -w.seconds)
