"""Budgets on the real engine: the bundled order desk, the scripted model priced by an override.

A monthly budget stops a running run before the first model call made after the budget is used
up (`limit_exceeded`), refuses new runs with a clear message, and each threshold is announced
once (alert row, audit row)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.core.errors import ValidationFailed
from apps.costs import services as costs
from apps.costs.models import BudgetAlert, UsageRecord
from apps.runs import services, worker
from apps.runs.models import RunEvent

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 500}

FIVE_LOOKUPS = [{"call": [{"tool": "orders.get_order_status", "args": {"order_id": f"A-100{n}"}}]}
                for n in range(1, 6)] + [{"say": "done"}]


def priced_scripted_model(actor) -> None:
    """Make the free scripted model cost money: $1000 per million input tokens (a call costs cents)."""
    costs.set_model_price(actor=actor, model="scripted", provider="scripted", input_per_mtok=Decimal(1000),
                          output_per_mtok=Decimal(10), effective_from=timezone.now() - timedelta(days=1))


def looper(desk, name: str):
    agent = desk.agent(name, FIVE_LOOKUPS, [{"tool": "orders.get_order_status", "policy": "auto"}], max_steps=10)
    return agent, desk.sequential(f"{name} crew", [("look", agent, "Look at {order_id}.", [])])


def run_to_end(desk, crew):
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    return worker.drive_run(run_id=run.id)


def test_an_agent_budget_stops_the_run_at_the_first_call_after_it_is_used_up(desk, actor):
    priced_scripted_model(actor)
    agent, crew = looper(desk, "Spender")
    costs.set_budget(actor=actor, scope="agent", target_id=agent.id, target_label=agent.name, amount_usd="0.5")

    run = run_to_end(desk, crew)

    assert run.status == "limit_exceeded", run.error
    assert run.error.startswith("Budget: The monthly budget of the agent Spender ($0.50) is used up")
    spent = [u.cost_usd for u in UsageRecord.objects.filter(run_id=run.id).order_by("created_at")]
    assert 1 <= len(spent) < 6  # stopped before the script ran out
    assert sum(spent) >= Decimal("0.5") > sum(spent[:-1])  # the last call crossed it; the next was refused
    finished = RunEvent.objects.get(run=run, type="run.finished")
    assert finished.data["status"] == "limit_exceeded"
    marks = sorted(BudgetAlert.objects.filter(budget__target_id=agent.id).values_list("threshold", flat=True))
    assert marks == [50, 80, 100]  # each announced once, though several calls were above 50 %
    audited = AuditEvent.objects.filter(org_id=actor.org_id, action="costs.budget_threshold")
    assert sorted(e.data["threshold"] for e in audited) == [50, 80, 100]


def test_a_used_up_org_budget_refuses_new_runs_with_the_reason(desk, actor):
    priced_scripted_model(actor)
    _, crew = looper(desk, "Refused")
    first = run_to_end(desk, crew)
    spent = first.cost_usd
    assert spent > 0
    costs.set_budget(actor=actor, scope="org", amount_usd=str(spent))

    with pytest.raises(ValidationFailed) as refused:
        services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    assert "The organisation's monthly budget" in refused.value.message
    assert "is used up" in refused.value.errors["crew"]

    costs.set_budget(actor=actor, scope="org", amount_usd=str(spent * 10))  # an admin raises it
    assert services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False).status == "queued"


def test_this_crews_budget_stops_its_run_at_the_first_call_after_it_is_used_up(desk, actor):
    priced_scripted_model(actor)
    _, crew = looper(desk, "Crew spender")
    costs.set_budget(actor=actor, scope="crew", target_id=crew.id, target_label=crew.name, amount_usd="0.5")
    run = run_to_end(desk, crew)
    assert run.status == "limit_exceeded", run.error
    assert run.error.startswith("Budget: The monthly budget of the crew Crew spender crew ($0.50) is used up")
    assert 1 <= UsageRecord.objects.filter(run_id=run.id).count() < 6  # stopped before the script ran out


def test_another_crews_budget_does_not_stop_this_crew(desk, actor):
    priced_scripted_model(actor)
    _, crew = looper(desk, "Free to run")
    _, other = looper(desk, "Capped")
    costs.set_budget(actor=actor, scope="crew", target_id=other.id, target_label=other.name, amount_usd="0.0001")
    run = run_to_end(desk, crew)
    assert run.status == "succeeded", run.error


def test_a_per_run_budget_stops_each_run_before_the_call_that_would_cross_it(desk, actor):
    priced_scripted_model(actor)
    _, crew = looper(desk, "Per run")
    costs.set_budget(actor=actor, scope="run", amount_usd="1.5")
    run = run_to_end(desk, crew)
    assert run.status == "limit_exceeded"
    assert run.error.startswith("Budget: The per-run budget ($1.50) would be crossed"), run.error
    assert Decimal(0) < run.cost_usd <= Decimal("1.5")


def test_a_budget_cannot_be_kept_for_a_model_with_no_price(desk, actor):
    from apps.agents import services as agent_services

    connection = agent_services.create_connection(actor=actor, name="Self-hosted", provider="openai_compatible",
                                                  base_url="http://127.0.0.1:9/v1")
    agent = agent_services.create_agent(actor=actor, name="Unpriced", connection_id=connection.id,
                                        model="my-llama", grants=[])
    crew = desk.sequential("Unpriced crew", [("look", agent, "Look at {order_id}.", [])])
    costs.set_budget(actor=actor, scope="org", amount_usd="100")
    run = run_to_end(desk, crew)
    assert run.status == "limit_exceeded"
    assert "price is unknown" in run.error and "Set a price for the model under Costs" in run.error
    assert not UsageRecord.objects.filter(run_id=run.id).exists()  # refused before any call was made


def test_a_used_up_agent_budget_refuses_new_runs_of_crews_using_it(desk, actor):
    priced_scripted_model(actor)
    agent, crew = looper(desk, "Thrifty")
    spent = run_to_end(desk, crew).cost_usd
    budget = costs.set_budget(actor=actor, scope="agent", target_id=agent.id, target_label=agent.name,
                              amount_usd=str(spent / 2))

    with pytest.raises(ValidationFailed) as refused:
        services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    assert refused.value.message.startswith(f"The monthly budget of the agent Thrifty (${budget.amount_usd:.2f}) "
                                            f"is used up: ${spent:.2f} spent this month.")
    assert "when an admin raises the budget under Costs" in refused.value.errors["crew"]
    _, other = looper(desk, "Unaffected")  # another agent's crew still starts
    assert services.start_run(actor=desk.actor, crew_id=other.id, inputs=A1001, enqueue=False).status == "queued"
