"""The costs page's run numbers against hand-computed ones: top runs by cost, cost per successful run
(runs with an unknown price left out, and said so) and hours waited for approvals per crew."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalRequest
from apps.crews import services as crews
from apps.runs import history
from apps.runs import services as runs
from apps.runs.models import Run
from tests.agents.factories import make_agent, order_desk

pytestmark = pytest.mark.django_db


def test_top_runs_cost_per_successful_run_and_approval_waits(org, owner):
    actor = member_actor(owner)
    tools = order_desk(org)
    agent = make_agent(org, name="Desk", grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    refunds, returns = (crews.create_crew(actor=actor, name=name, tasks=[{"name": "t", "description": "Do it",
                                                                           "agent_id": str(agent.id)}])
                        for name in ("Refunds", "Returns"))
    now = timezone.now()
    made = []
    for crew, status, cost in [(refunds, "succeeded", "0.30"), (refunds, "succeeded", "0.10"),
                               (returns, "succeeded", None), (returns, "failed", "0.90"), (returns, "succeeded", "0")]:
        run = runs.start_run(actor=actor, crew_id=crew.id, inputs={}, enqueue=False)
        Run.objects.filter(id=run.id).update(status=status, cost_usd=None if cost is None else Decimal(cost))
        made.append(run)
    # The runs' ledger records the crew in the request's context; a request without it is counted by its run's crew
    for run, opened_h, decided_h, context in [(made[0], 5, 3, {"crew": "Refunds"}), (made[1], 2, None, {}),
                                              (made[3], 4, 3.5, {"crew": "Returns"}), (made[3], 1, 2, {})]:
        request = approvals.open_request(
            org_id=org.id, run_id=run.id, tool_call_id=None, agent_id=agent.id, tool_id=tools["refund_order"].id,
            title="Refund", arguments={}, args_hash="0" * 64, definition_hash="", risk="write", reason="r",
            rule="approve", context=context, expires_at=None, requested_by_user_id=None)
        ApprovalRequest.objects.filter(id=request.id).update(
            created_at=now - timedelta(hours=opened_h),
            decided_at=None if decided_h is None else now - timedelta(hours=decided_h))
    window = {"org_id": org.id, "since": now - timedelta(days=1), "until": now + timedelta(minutes=1)}

    top = list(history.top_runs(**window))
    assert [r.id for r in top] == [made[3].id, made[0].id, made[1].id]  # by cost; $0 and unknown left out

    outcomes = history.successful_run_cost(**window)
    assert (outcomes.succeeded, outcomes.unknown_runs, outcomes.cost_usd) == (4, 1, Decimal("0.40"))
    assert outcomes.per_run == Decimal("0.133333")  # $0.40 over the 3 succeeded runs with a known cost

    waits = history.approval_waits(**window, now=now)
    # Refunds: 2 h decided + 2 h still pending; Returns: 0.5 h, and a decision "before" its request counts 0
    assert [(w.crew, w.approvals, w.hours) for w in waits] == [("Refunds", 2, 4.0), ("Returns", 2, 0.5)]
