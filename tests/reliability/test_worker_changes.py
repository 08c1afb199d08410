"""Changes made while a real worker drives a run reach it: a person's cancel stops the run at the next
step boundary, an admin's quarantine refuses the tool's next call. The worker hears both from Postgres
(apps/runs/store/notices.py) on its long-lived prefork connection, instead of reading at every step."""

from __future__ import annotations

import pytest

from apps.approvals.definition_changes import inbox
from apps.registry import services as registry_services
from apps.registry.models import Tool
from apps.runs import services
from apps.runs.models import CallState, RunStep, ToolCall
from tests.reliability.conftest import SLOW, wait_in_flight, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancel_while_a_worker_runs_a_tool_call_stops_the_run_before_the_next_call(cluster, slow_desk):
    cluster.worker()
    run = slow_desk.start(slow_desk.crew("Cancel mid-call", slow_calls=3), "cancel")
    wait_in_flight(slow_desk, run.id, "cancel", n=1)
    services.cancel_run(actor=slow_desk.actor, run_id=run.id)
    run = wait_status(run.id, {"cancelled", "succeeded", "failed"}, timeout=60)
    assert run.status == "cancelled", run.error
    assert slow_desk.executed("cancel") == {"cancel-1": 1}  # the call in flight finished; no other was sent
    assert ToolCall.objects.filter(run=run, qualified_name=SLOW).count() == 1
    assert RunStep.objects.filter(run=run, kind="llm").count() == 2  # the lookup's and refund #1's


def test_a_tool_quarantined_while_a_worker_runs_it_is_refused_at_its_next_call(cluster, slow_desk):
    cluster.worker()
    run = slow_desk.start(slow_desk.crew("Quarantine mid-run", slow_calls=2), "quarantine")
    wait_in_flight(slow_desk, run.id, "quarantine", n=1)
    tool = Tool.objects.get(org_id=slow_desk.actor.org_id, qualified_name=SLOW)
    registry_services.update_tool(actor=slow_desk.actor, tool_id=tool.id, state="quarantined", review=inbox)
    run = wait_status(run.id, {"succeeded", "failed", "cancelled"}, timeout=60)
    assert slow_desk.executed("quarantine") == {"quarantine-1": 1}
    second = ToolCall.objects.get(run=run, qualified_name=SLOW, arguments__request_id="quarantine-2")
    assert second.state == CallState.DENIED and second.dispatched_at is None and "quarantined" in second.reason
