"""Reads of spend, prices and budgets. One selector (`spend_by`) feeds the costs page and `GET /costs`.

Costs sits below crews, agents and runs: it names crews and agents through lazy model
references (`django.apps.apps.get_model`) only, to label rows, never to join them.

Unknown-price usage (`cost_usd` NULL) is counted (`unknown_calls`, `unknown_tokens`) and never
summed as zero: a group whose every call had no price has `cost_usd=None`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.apps import apps
from django.db import connections
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek
from django.utils import timezone

from apps.core.errors import NotFound, ValidationFailed
from apps.core.rows import Columns, fetch
from apps.costs.models import Budget, BudgetAlert, BudgetScope, DailySpend, ModelPrice, UsageRecord
from apps.costs.rollup import NO_ID

GROUPS = ("day", "week", "month", "crew", "agent", "model", "provider")
TIME_GROUPS = {"day": TruncDay, "week": TruncWeek, "month": TruncMonth}
ZERO = Decimal(0)
CENT_MILLIONTH = Decimal("0.00000001")  # the precision costs are stored with


@dataclass(frozen=True)
class SpendRow:
    key: str  # a date (day/week/month: the period's first day), an id, a model or provider name
    label: str
    runs: int
    calls: int
    tokens_in: int  # includes cached
    tokens_cached: int
    tokens_out: int
    cost_usd: Decimal | None  # known spend; None when every call of the group had an unknown price
    unknown_calls: int  # calls with no known price: their cost is not in cost_usd

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "runs": self.runs, "calls": self.calls,
                "tokens_in": self.tokens_in, "tokens_cached": self.tokens_cached, "tokens_out": self.tokens_out,
                "cost_usd": self.cost_usd, "unknown_calls": self.unknown_calls}


def usage_rows(*, org_id: UUID | str, since: datetime | None = None, until: datetime | None = None) -> QuerySet:
    rows = UsageRecord.objects.filter(org_id=org_id)
    if since:
        rows = rows.filter(created_at__gte=since)
    if until:
        rows = rows.filter(created_at__lt=until)
    return rows


@dataclass(frozen=True)
class RunSpend:
    """One run's model calls (oldest first) and their total, as the costs page shows them for `?run=`."""

    calls: list[UsageRecord]
    total: SpendRow


def run_spend(*, org_id: UUID | str, run_id: UUID | str) -> RunSpend:
    """The usage rows of one run of this organisation and their sum (unknown prices counted, never summed)."""
    calls = list(usage_rows(org_id=org_id).filter(run_id=run_id).order_by("created_at", "id"))
    known = [c.cost_usd for c in calls if c.cost_usd is not None]
    total = SpendRow(key=str(run_id), label="this run", runs=1 if calls else 0, calls=len(calls),
                     tokens_in=sum(c.input_tokens for c in calls), tokens_cached=sum(c.cached_tokens for c in calls),
                     tokens_out=sum(c.output_tokens for c in calls), cost_usd=sum(known, ZERO) if known else None,
                     unknown_calls=len(calls) - len(known))
    return RunSpend(calls=calls, total=total)


SUMS = ("runs", "calls", "tokens_in", "tokens_cached", "tokens_out", "cost", "unknown_calls")
RUNS_COLUMN = {"agent": "runs_agent", "model": "runs_model", "provider": "runs_provider"}  # others: "runs"
GROUP_FIELD = {"crew": "crew_id", "agent": "agent_id"}


def spend_by(*, org_id: UUID | str, group_by: str, since: datetime | None = None,
             until: datetime | None = None, from_rows: bool = False) -> list[SpendRow]:
    """Spend grouped by period (day/week/month, UTC), crew, agent, model or provider.

    Periods are in time order; other groups by known cost, highest first. Raises ValidationFailed
    for an unknown `group_by`. Whole days of the range are read from the daily rollup, the rest
    (a range that starts or ends inside a day) from the usage rows; `from_rows=True` reads only
    usage rows (the same numbers, slower). A group's `runs` counts the runs whose first call in
    that group falls in the range (see `apps.costs.rollup`).
    """
    if group_by not in GROUPS:
        raise ValidationFailed(f"group_by must be one of {', '.join(GROUPS)}.",
                               {"group_by": f"One of {', '.join(GROUPS)}."})
    return _ordered(org_id, group_by, _spend(org_id, group_by, since, until, from_rows))


def spend_total(*, org_id: UUID | str, since: datetime | None = None, until: datetime | None = None,
                from_rows: bool = False) -> SpendRow:
    return _total(_spend(org_id, None, since, until, from_rows))


def spend_breakdowns(*, org_id: UUID | str, group_bys: list[str], since: datetime | None = None,
                     until: datetime | None = None) -> tuple[SpendRow, dict[str, list[SpendRow]]]:
    """The total and several breakdowns (crew, agent, model, provider) from one read of the rollup:
    the same rows as `spend_total` and `spend_by` for each, for a page that shows them all."""
    if not set(group_bys) <= set(GROUPS) - set(TIME_GROUPS):
        raise ValidationFailed("Breakdowns are by crew, agent, model or provider.", {"group_by": "Not a period."})
    days, edges = _split(since, until)
    merged = {g: _merge([_row_groups(org_id, g, start, end) for start, end in edges])
              for g in [None, *group_bys]}
    if days is not None:
        keys = ("crew_id", "agent_id", "provider", "model")
        runs = ("runs", "runs_agent", "runs_model", "runs_provider")
        rows = list(_days(org_id, *days).values(*keys).annotate(
            **{f"{c}_sum": Sum(c) for c in runs}, calls=Sum("calls"), tokens_in=Sum("input_tokens"),
            tokens_cached=Sum("cached_tokens"), tokens_out=Sum("output_tokens"), cost=Sum("cost_usd"),
            unknown_calls=Sum("unknown_calls")).order_by())
        for group_by, groups in merged.items():
            column = f"{RUNS_COLUMN.get(group_by or '', 'runs')}_sum"
            field = GROUP_FIELD.get(group_by or "", group_by)
            folded = [{**row, "runs": row[column], "group": row[field] if field else "total"} for row in rows]
            _merge([folded], into=groups)
    return _total(merged[None]), {g: _ordered(org_id, g, merged[g]) for g in group_bys}


def _ordered(org_id: UUID | str, group_by: str, groups: dict[str, dict[str, Any]]) -> list[SpendRow]:
    if group_by in TIME_GROUPS:
        ordered = sorted(groups.values(), key=lambda g: _key(g["group"]))
    else:
        ordered = sorted(groups.values(), key=lambda g: (g["calls"] == g["unknown_calls"], -g["cost"],
                                                         g["group"] is None, _key(g["group"])))
    labels = _labels(org_id, group_by, [g["group"] for g in ordered])
    return [_row(g, labels) for g in ordered]


def _total(groups: dict[str, dict[str, Any]]) -> SpendRow:
    return _row(groups.get("total") or {"group": "total", **dict.fromkeys(SUMS, 0)}, {"total": "Total"})


def _spend(org_id: UUID | str, group_by: str | None, since: datetime | None, until: datetime | None,
           from_rows: bool) -> dict[str, dict[str, Any]]:
    """Group key -> {"group": value, sums}: the rollup's whole days plus the usage rows of partial days."""
    parts: list[Any] = []
    days, edges = (None, [(since, until)]) if from_rows else _split(since, until)
    if days is not None:
        parts.append(_rollup_groups(org_id, group_by, *days))
    parts += [_row_groups(org_id, group_by, start, end) for start, end in edges]
    return _merge(parts)


def _merge(parts: list[Any], into: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Adds up parts (iterables of {"group": value, sums}) per group; groups without calls are left out."""
    merged = {} if into is None else into
    for part in parts:
        for g in part:
            group = g.get("group", "total")
            if group == NO_ID:
                group = None
            elif isinstance(group, datetime):
                group = group.astimezone(UTC).date()
            entry = merged.setdefault(_key(group), {"group": group, **dict.fromkeys(SUMS, 0)})
            for name in SUMS:
                entry[name] += g[name] or 0
    for key in [k for k, v in merged.items() if not v["calls"]]:
        del merged[key]
    return merged


def _split(since: datetime | None, until: datetime | None) -> tuple[tuple[date | None, date | None] | None,
                                                                      list[tuple[datetime | None, datetime | None]]]:
    """[since, until) as whole UTC days [first, end) for the rollup and the partial days around them."""
    def midnight(at: datetime) -> datetime:
        at = at.astimezone(UTC)
        return datetime(at.year, at.month, at.day, tzinfo=UTC)

    first = None if since is None else midnight(since) + timedelta(days=0 if midnight(since) == since else 1)
    end = None if until is None else midnight(until)
    if first is not None and end is not None and first >= end:
        return None, [(since, until)]
    edges = []
    if first is not None and since < first:
        edges.append((since, first))
    if end is not None and end < until:
        edges.append((end, until))
    return (first and first.date(), end and end.date()), edges


def _days(org_id: UUID | str, first: date | None, end: date | None) -> QuerySet[DailySpend]:
    rows = DailySpend.objects.filter(org_id=org_id)
    if first:
        rows = rows.filter(day__gte=first)
    if end:
        rows = rows.filter(day__lt=end)
    return rows


def _rollup_groups(org_id: UUID | str, group_by: str | None, first: date | None, end: date | None) -> Any:
    rows = _days(org_id, first, end)
    sums = {"runs": Sum(RUNS_COLUMN.get(group_by or "", "runs")), "calls": Sum("calls"),
            "tokens_in": Sum("input_tokens"), "tokens_cached": Sum("cached_tokens"),
            "tokens_out": Sum("output_tokens"), "cost": Sum("cost_usd"), "unknown_calls": Sum("unknown_calls")}
    if group_by is None:
        return [rows.aggregate(**sums)]
    if group_by == "day":
        group = F("day")
    elif group_by in TIME_GROUPS:
        group = TIME_GROUPS[group_by]("day")
    else:
        group = F(GROUP_FIELD.get(group_by, group_by))
    return rows.values(group=group).annotate(**sums).order_by()


def _row_groups(org_id: UUID | str, group_by: str | None, since: datetime | None,
                until: datetime | None) -> Any:
    """The same sums from usage rows; a row counts its run when no earlier call of the run is in its group."""
    earlier = UsageRecord.objects.filter(org_id=OuterRef("org_id"), run_id=OuterRef("run_id")).filter(
        Q(created_at__lt=OuterRef("created_at")) | Q(created_at=OuterRef("created_at"), id__lt=OuterRef("id")))
    if group_by == "agent":
        first = (Q(agent_id__isnull=True) & ~Exists(earlier.filter(agent_id__isnull=True))
                 | Q(agent_id__isnull=False) & ~Exists(earlier.filter(agent_id=OuterRef("agent_id"))))
    elif group_by in ("model", "provider"):
        first = Q(~Exists(earlier.filter(**{group_by: OuterRef(group_by)})))
    else:
        first = Q(~Exists(earlier))
    sums = {"runs": Count("id", filter=Q(run_id__isnull=False) & first), "calls": Count("id"),
            "tokens_in": Sum("input_tokens"), "tokens_cached": Sum("cached_tokens"),
            "tokens_out": Sum("output_tokens"), "cost": Sum("cost_usd"),
            "unknown_calls": Count("id", filter=Q(cost_usd__isnull=True))}
    rows = usage_rows(org_id=org_id, since=since, until=until)
    if group_by is None:
        return [rows.aggregate(**sums)]
    if group_by in TIME_GROUPS:
        group = TIME_GROUPS[group_by]("created_at", tzinfo=UTC)
    else:
        group = F(GROUP_FIELD.get(group_by, group_by))
    return rows.values(group=group).annotate(**sums).order_by()


def _row(g: dict[str, Any], labels: dict[str, str]) -> SpendRow:
    key = _key(g["group"])
    known = g["calls"] - g["unknown_calls"]
    cost = (g["cost"] or ZERO) if known else None
    return SpendRow(key=key, label=labels.get(key, key), runs=g["runs"], calls=g["calls"],
                    tokens_in=g["tokens_in"], tokens_cached=g["tokens_cached"], tokens_out=g["tokens_out"],
                    cost_usd=cost, unknown_calls=g["unknown_calls"])


def _key(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).date().isoformat()
    return str(value)


def _labels(org_id: UUID | str, group_by: str, keys: list[Any]) -> dict[str, str]:
    """Names for crew and agent ids (a deleted one keeps a short id); other keys label themselves."""
    if group_by not in ("crew", "agent"):
        return {_key(k): (_key(k) or "(none)") for k in keys}
    model = apps.get_model("crews", "Crew") if group_by == "crew" else apps.get_model("agents", "Agent")
    ids = [k for k in keys if k]
    names = {str(pk): name for pk, name in model.objects.filter(org_id=org_id, id__in=ids).values_list("id", "name")}
    none = "(no crew)" if group_by == "crew" else "(no agent)"
    return {_key(k): names.get(str(k), f"deleted {group_by} {str(k)[:8]}") if k else none for k in keys}


def parse_range(since: date | datetime | None, until: date | datetime | None,
                default_days: int = 30) -> tuple[datetime, datetime]:
    """A [since, until) range in UTC; dates mean whole days (until inclusive). Defaults to the last 30 days."""
    def as_dt(value: date | datetime, *, end: bool) -> datetime:
        if isinstance(value, datetime):
            return value if timezone.is_aware(value) else value.replace(tzinfo=UTC)
        return datetime(value.year, value.month, value.day, tzinfo=UTC) + timedelta(days=1 if end else 0)

    now = timezone.now()
    end = as_dt(until, end=True) if until else datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    start = as_dt(since, end=False) if since else end - timedelta(days=default_days)
    if start >= end:
        raise ValidationFailed("The start of the range must be before its end.", {"since": "Before the end date."})
    return start, end


# --- prices --------------------------------------------------------------------------------------

def org_prices(*, org_id: UUID | str) -> QuerySet[ModelPrice]:
    return ModelPrice.objects.filter(org_id=org_id).order_by("model", "provider", "-effective_from")


# --- budgets -------------------------------------------------------------------------------------

def month_start(at: datetime | None = None) -> datetime:
    at = (at or timezone.now()).astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def period_of(budget: Budget, *, at: datetime | None = None, run_id: UUID | str | None = None) -> str:
    return str(run_id) if budget.scope == BudgetScope.RUN else month_start(at).strftime("%Y-%m")


def org_budgets(*, org_id: UUID | str) -> QuerySet[Budget]:
    return Budget.objects.filter(org_id=org_id)


def get_budget(*, org_id: UUID | str, budget_id: UUID | str) -> Budget:
    budget = Budget.objects.filter(org_id=org_id, id=budget_id).first() if _is_uuid(budget_id) else None
    if budget is None:
        raise NotFound("No such budget.")
    return budget


def _is_uuid(value: Any) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def budgets_for(*, org_id: UUID | str, crew_id: UUID | str | None, agent_ids: list[Any]) -> list[Budget]:
    """The budgets that apply to a model call (or a run) of this crew and these agents, in Budget's order."""
    return budgets_from(fetch(*budgets_statement(org_id=org_id, crew_id=crew_id, agent_ids=agent_ids)))


def budgets_statement(*, org_id: UUID | str, crew_id: UUID | str | None,
                      agent_ids: list[Any]) -> tuple[str, list[Any]]:
    """The read behind `budgets_for`, to send with others (apps.core.rows.fetch_together). Built once per number of
    agents: every run start and every task's first model call asks it, and compiled by the ORM each time it cost
    more than its round trip."""
    agents = [agent_id for agent_id in agent_ids if agent_id]
    budgets, sql = _budgets_read(len(agents))
    target = Budget._meta.get_field("target_id")
    targets = [target.get_db_prep_value(value, connections[budgets.using]) for value in (crew_id, *agents)]
    return sql, [budgets.param("org", org_id), *targets]  # a crew of None matches no crew budget


def budgets_from(rows: list[tuple]) -> list[Budget]:
    """`budgets_for` of the rows `budgets_statement` read."""
    budgets = _budgets_read(0)[0]
    return [budgets.instance(row) for row in rows]


@functools.cache
def _budgets_read(agents: int) -> tuple[Columns, str]:
    budgets = Columns.every(Budget, "b")
    scoped = (f"b.scope IN ('{BudgetScope.ORG}', '{BudgetScope.RUN}') "
              f"OR (b.scope = '{BudgetScope.CREW}' AND b.target_id = %s)")
    if agents:
        scoped += f" OR (b.scope = '{BudgetScope.AGENT}' AND b.target_id IN ({', '.join(['%s'] * agents)}))"
    order = ", ".join(f"b.{name}" for name in Budget._meta.ordering)
    return budgets, (f"SELECT {budgets.sql} FROM {budgets.table} b "  # noqa: S608
                     f"WHERE b.org_id = %s AND ({scoped}) ORDER BY {order}")


def spent(budget: Budget, *, at: datetime | None = None, run_id: UUID | str | None = None) -> Decimal:
    """Known spend against the budget in its current period (the month, UTC, from the rollup; or the run)."""
    if budget.scope == BudgetScope.RUN:
        rows = UsageRecord.objects.filter(org_id=budget.org_id, run_id=run_id)
        return rows.aggregate(total=Sum("cost_usd"))["total"] or ZERO
    rows = DailySpend.objects.filter(org_id=budget.org_id, day__gte=month_start(at).date())
    if budget.scope == BudgetScope.CREW:
        rows = rows.filter(crew_id=budget.target_id)
    elif budget.scope == BudgetScope.AGENT:
        rows = rows.filter(agent_id=budget.target_id)
    return (rows.aggregate(total=Sum("cost_usd"))["total"] or ZERO).quantize(CENT_MILLIONTH)  # SQLite sums floats


@dataclass(frozen=True)
class BudgetUse:
    budget: Budget
    spent_usd: Decimal

    @property
    def percent(self) -> int:
        return int(self.spent_usd * 100 / self.budget.amount_usd) if self.budget.amount_usd else 100

    @property
    def exhausted(self) -> bool:
        return self.spent_usd >= self.budget.amount_usd

    @property
    def level(self) -> str:
        return "danger" if self.exhausted else "warning" if self.percent >= 80 else "ok"


def budget_use(*, org_id: UUID | str) -> list[BudgetUse]:
    """Every monthly budget with this month's spend (run budgets have no standing use)."""
    return [BudgetUse(b, spent(b)) for b in org_budgets(org_id=org_id).exclude(scope=BudgetScope.RUN)]


def all_budget_use() -> list[tuple[str, str, float]]:
    """Every organisation's monthly budgets as (org slug, budget, spent / amount): operators' metrics."""
    budgets = Budget.objects.exclude(scope=BudgetScope.RUN).select_related("org")
    return [(b.org.slug, f"{b.scope}:{b.target_label or b.target_id or 'org'}",
             float(spent(b) / b.amount_usd) if b.amount_usd else 1.0) for b in budgets]


def target_budget_use(*, org_id: UUID | str, scope: str, target_id: UUID | str) -> BudgetUse | None:
    """A crew's or agent's monthly budget with this month's spend, or None (the agent and crew pages)."""
    budget = Budget.objects.filter(org_id=org_id, scope=scope, target_id=target_id).first()
    return None if budget is None else BudgetUse(budget, spent(budget))


def recent_alerts(*, org_id: UUID | str) -> list[BudgetAlert]:
    """This month's alerts at 80 % or more, newest first: the banner on every page."""
    alerts = (BudgetAlert.objects.filter(org_id=org_id, created_at__gte=month_start(), threshold__gte=80)
              .exclude(budget__scope=BudgetScope.RUN).select_related("budget"))
    return list(alerts.order_by("-threshold", "-created_at")[:3])


def describe(budget: Budget) -> str:
    if budget.scope == BudgetScope.ORG:
        return "The organisation's monthly budget"
    if budget.scope == BudgetScope.RUN:
        return "The per-run budget"
    return f"The monthly budget of the {budget.scope} {budget.target_label or str(budget.target_id)[:8]}"


def start_refusal(*, org_id: UUID | str, crew_id: UUID | str | None, agent_ids: list[Any]) -> str | None:
    """Why a new run may not start (a monthly budget used up), or None."""
    for budget in budgets_for(org_id=org_id, crew_id=crew_id, agent_ids=agent_ids):
        if budget.scope == BudgetScope.RUN:
            continue
        used = spent(budget)
        if used >= budget.amount_usd:
            return (f"{describe(budget)} (${budget.amount_usd:.2f}) is used up: ${used:.2f} spent this month. "
                    "New runs start again next month or when an admin raises the budget under Costs.")
    return None


def call_refusal(*, org_id: UUID | str, crew_id: UUID | str | None, agent_id: UUID | str | None,
                 run_id: UUID | str, run_cost_usd: Decimal | None, next_cost_usd: Decimal | None) -> str | None:
    """Why the next model call may not happen (a budget at 100 %, or a price a budget cannot check), or None."""
    for budget in budgets_for(org_id=org_id, crew_id=crew_id, agent_ids=[agent_id]):
        if next_cost_usd is None or (budget.scope == BudgetScope.RUN and run_cost_usd is None):
            return (f"{describe(budget)} (${budget.amount_usd:.2f}) cannot be kept: the model's price is unknown. "
                    "Set a price for the model under Costs.")
        if budget.scope == BudgetScope.RUN:
            if run_cost_usd + next_cost_usd > budget.amount_usd:
                return (f"{describe(budget)} (${budget.amount_usd:.2f}) would be crossed: the run has spent "
                        f"${run_cost_usd:.4f} and the next call could cost about ${next_cost_usd:.4f}.")
            continue
        used = spent(budget)
        if used >= budget.amount_usd:
            return f"{describe(budget)} (${budget.amount_usd:.2f}) is used up: ${used:.4f} spent this month."
    return None
