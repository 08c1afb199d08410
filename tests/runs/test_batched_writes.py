"""A step's writes go to Postgres as one batch (apps.core.db.pipeline), and a batch cannot tell a row
count or raise at its statement. This pins what the batch must still refuse: a step of a worker that
lost the run commits nothing. (A budget crossed by a batched model call: tests/runs/test_budgets.py.)"""

from __future__ import annotations

import pytest

from apps.costs.models import UsageRecord
from apps.runs import services
from apps.runs.engine import tools
from apps.runs.models import Run, RunEvent, RunStep, ToolCall
from tests.runs.conftest import LOOK_UP

# Real transactions: the rolled-back step must be rolled back for good, as on a worker.
pytestmark = pytest.mark.django_db(transaction=True)

A1001 = {"order_id": "A-1001", "amount_cents": 500}


def _looker(desk, name: str):
    agent = desk.agent(name, [{"call": [LOOK_UP]}, {"say": "Found it.\nSTATUS: done\nREASON: looked"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    return desk.sequential(name, [("look", agent, "Look up order {order_id}.", [])])


def test_a_worker_whose_call_was_taken_over_commits_nothing_of_its_next_step(desk, monkeypatch):
    """While the call was out, another worker took the run over and made the call `unknown` (the sweeper's
    takeover). The late worker's completion goes out in its next step's batch: the batch must roll back
    (LeaseLost), not record a result over `unknown` and carry on with the next model call."""
    original = tools.call_tool

    def taken_over_meanwhile(*args, **kwargs):
        result = original(*args, **kwargs)
        ToolCall.objects.filter(state="dispatched").update(state="unknown")
        return result

    monkeypatch.setattr(tools, "call_tool", taken_over_meanwhile)
    run = services.start_run(actor=desk.actor, crew_id=_looker(desk, "Taken over").id, inputs=A1001, enqueue=False)
    run = services.drive_run(run_id=run.id)

    assert run.status == "running" and not run.error  # the run is the other worker's to finish
    row = ToolCall.objects.get(run=run)
    assert row.state == "unknown" and row.result is None and row.finished_at is None
    # The model call after the tool call was batched with the completion: none of it stayed.
    assert RunStep.objects.filter(run=run, kind="llm").count() == 1
    assert UsageRecord.objects.filter(run_id=run.id).count() == 1
    assert not RunEvent.objects.filter(run=run, type__in=["tool.completed", "run.finished"]).exists()
    assert Run.objects.get(id=run.id).tokens_in == UsageRecord.objects.get(run_id=run.id).input_tokens

