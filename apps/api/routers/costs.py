from decimal import Decimal
from uuid import UUID

from ninja import Query, Router, Schema, Status

from apps.agents import selectors as agents
from apps.api.bodies import Body
from apps.api.instants import Day, Instant
from apps.costs import selectors, services
from apps.crews import selectors as crews

router = Router(tags=["costs"])


class CostRowOut(Schema):
    key: str
    label: str
    runs: int
    calls: int
    tokens_in: int
    tokens_cached: int
    tokens_out: int
    cost_usd: Decimal | None  # known spend; null when every call of the group had an unknown price
    unknown_calls: int  # calls with no known price (not included in cost_usd)


class CostFilters(Schema):
    group_by: str = "day"
    since: Day | Instant | None = None
    until: Day | Instant | None = None


@router.get("", response=list[CostRowOut])
def list_costs(request, filters: Query[CostFilters]):
    """Spend grouped by day, week, month (UTC), crew, agent, model or provider: the numbers of the costs page.

    `since`/`until` are dates (whole days, `until` inclusive) or timestamps; the default is the last 30 days.
    """
    request.auth.require("org.view")
    since, until = selectors.parse_range(filters.since, filters.until)
    return [row.as_dict() for row in selectors.spend_by(org_id=request.auth.org_id, group_by=filters.group_by,
                                                          since=since, until=until)]


class BudgetOut(Schema):
    id: UUID
    scope: str
    target_id: UUID | None
    target_label: str
    amount_usd: Decimal
    thresholds: list[int]


class BudgetIn(Body):
    scope: str
    amount_usd: Decimal
    target_id: UUID | None = None
    thresholds: list[int] | None = None


@router.get("/budgets", response=list[BudgetOut])
def list_budgets(request):
    request.auth.require("org.view")
    return list(selectors.org_budgets(org_id=request.auth.org_id))


@router.post("/budgets", response={201: BudgetOut})
def set_budget(request, payload: BudgetIn):
    """Creates or replaces the budget of a scope (`org`, `crew`, `agent` per month; `run`: each run)."""
    request.auth.require("costs.manage")
    label = ""
    if payload.scope == "crew" and payload.target_id:
        label = crews.get_crew(org_id=request.auth.org_id, crew_id=payload.target_id).name
    elif payload.scope == "agent" and payload.target_id:
        label = agents.get_agent(org_id=request.auth.org_id, agent_id=payload.target_id).name
    budget = services.set_budget(actor=request.auth, scope=payload.scope, amount_usd=payload.amount_usd,
                                 target_id=payload.target_id, target_label=label, thresholds=payload.thresholds)
    return Status(201, budget)


@router.delete("/budgets/{budget_id}", response={204: None})
def delete_budget(request, budget_id: UUID):
    services.delete_budget(actor=request.auth, budget_id=budget_id)
    return Status(204, None)
