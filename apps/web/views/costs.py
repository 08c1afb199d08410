"""The costs page: spend over time (Chart.js, static/js/costs-chart.js), breakdowns, top runs, waits for
approvals, budget use; admins manage price overrides and budgets here."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.agents import selectors as agents
from apps.core.errors import ValidationFailed
from apps.costs import selectors, services
from apps.costs.models import BudgetScope
from apps.costs.pricing import EXAMPLE_PRICE_NOTE
from apps.crews import selectors as crews
from apps.runs import history
from apps.runs import selectors as runs
from apps.web.access import member_required, post_only
from apps.web.forms import BudgetForm, CostRangeForm, PriceForm, apply_domain_errors

BREAKDOWNS = [("crew", "By crew"), ("agent", "By agent"), ("model", "By model"), ("provider", "By provider")]


def cost_range(request: HttpRequest) -> tuple[CostRangeForm, datetime, datetime, str]:
    form = CostRangeForm(request.GET or None)
    values = form.cleaned_data if form.is_valid() else {}
    try:
        since, until = selectors.parse_range(values.get("since"), values.get("until"))
    except ValidationFailed:
        since, until = selectors.parse_range(None, None)
    return form, since, until, values.get("group_by") or "day"


@member_required()
def costs(request: HttpRequest) -> HttpResponse:
    context = costs_context(request)
    if request.GET.get("run"):  # the run page's "costs of this run": its model calls and their total
        run = runs.get_run(org_id=request.actor.org_id, run_id=request.GET["run"])  # NotFound: 404
        context.update(run=run, run_spend=selectors.run_spend(org_id=request.actor.org_id, run_id=run.id))
    return render(request, "web/costs/page.html", context)


def costs_context(request: HttpRequest, *, price_form: PriceForm | None = None,
                  budget_form: BudgetForm | None = None) -> dict:
    org_id = request.actor.org_id
    form, since, until, group_by = cost_range(request)
    series = selectors.spend_by(org_id=org_id, group_by=group_by, since=since, until=until)
    total, by = selectors.spend_breakdowns(org_id=org_id, group_bys=[key for key, _ in BREAKDOWNS], since=since,
                                           until=until)
    chart = {"labels": [r.key for r in series],
             "cost": [float(r.cost_usd) if r.cost_usd is not None else None for r in series],
             "unknown": [r.unknown_calls for r in series]}
    return {
        "form": form, "since": since, "until": until, "group_by": group_by, "series": series, "chart": chart,
        "total": total, "breakdowns": [(key, title, by[key]) for key, title in BREAKDOWNS],
        "top_runs": history.top_runs(org_id=org_id, since=since, until=until),
        "outcomes": history.successful_run_cost(org_id=org_id, since=since, until=until),
        "waits": history.approval_waits(org_id=org_id, since=since, until=until),
        "budgets": selectors.budget_use(org_id=org_id),
        "run_budgets": selectors.org_budgets(org_id=org_id).filter(scope=BudgetScope.RUN),
        "prices": selectors.org_prices(org_id=org_id),
        "example_prices": [p for p in selectors.org_prices(org_id=org_id) if p.note == EXAMPLE_PRICE_NOTE],
        "can_manage": request.actor.can("costs.manage"),
        "price_form": price_form or PriceForm(initial={"effective_from": datetime.now(UTC).date()}),
        "budget_form": budget_form or BudgetForm(),
        "price_focus": first_invalid(price_form), "budget_focus": first_invalid(budget_form),
        "crews": crews.org_crews(org_id=org_id), "agents": agents.org_agents(org_id=org_id),
    }


def first_invalid(form: PriceForm | BudgetForm | None) -> str:
    """The field a failed save puts the cursor in (autofocus, so the browser scrolls the form into view;
    "__all__": the form's own error message); "" when nothing failed."""
    if form is None or not form.errors:
        return ""
    return next((name for name in form.fields if name in form.errors), "__all__")


@post_only
@member_required("costs.manage")
def price_add(request: HttpRequest) -> HttpResponse:
    form = PriceForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        day = data["effective_from"]
        try:
            services.set_model_price(
                actor=request.actor, model=data["model"].strip(), provider=data["provider"].strip(),
                input_per_mtok=data["input_per_mtok"], output_per_mtok=data["output_per_mtok"],
                cached_per_mtok=data["cached_per_mtok"], note=data["note"],
                effective_from=datetime(day.year, day.month, day.day, tzinfo=UTC))
        except ValidationFailed as exc:
            apply_domain_errors(form, exc)
        else:
            messages.success(request, f"Price for {data['model']} saved; calls from {day} on use it.")
            return redirect("web:costs")
    return render(request, "web/costs/page.html", costs_context(request, price_form=form), status=422)


@post_only
@member_required("costs.manage")
def price_delete(request: HttpRequest, price_id) -> HttpResponse:
    services.delete_model_price(actor=request.actor, price_id=price_id)
    messages.success(request, "Price removed. Calls already made keep the cost they were priced at.")
    return redirect("web:costs")


@post_only
@member_required("costs.manage")
def budget_set(request: HttpRequest) -> HttpResponse:
    form = BudgetForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            target_id, label = _target(request, data["scope"], data["target"])
            services.set_budget(actor=request.actor, scope=data["scope"], amount_usd=data["amount_usd"],
                                target_id=target_id, target_label=label, thresholds=data["thresholds"])
        except ValidationFailed as exc:
            apply_domain_errors(form, exc)
        else:
            messages.success(request, "Budget saved.")
            return redirect("web:costs")
    return render(request, "web/costs/page.html", costs_context(request, budget_form=form), status=422)


def _target(request: HttpRequest, scope: str, target: str) -> tuple[str | None, str]:
    """The crew's or agent's id and name, checked to be this organisation's (another org's is a 404)."""
    if scope not in (BudgetScope.CREW, BudgetScope.AGENT):
        return None, ""
    if not target:
        raise ValidationFailed(f"Pick the {scope}.", {"target": f"Pick the {scope}."})
    if scope == BudgetScope.CREW:
        crew = crews.get_crew(org_id=request.actor.org_id, crew_id=target)
        return str(crew.id), crew.name
    agent = agents.get_agent(org_id=request.actor.org_id, agent_id=target)
    return str(agent.id), agent.name


@post_only
@member_required("costs.manage")
def budget_delete(request: HttpRequest, budget_id) -> HttpResponse:
    services.delete_budget(actor=request.actor, budget_id=budget_id)
    messages.success(request, "Budget removed.")
    return redirect("web:costs")
