"""Every tool call the engine makes leaves an audit row: the agent, the credential it ran with, the tool,
the arguments (redacted) and the result's state, in the organisation's hash chain like any other row."""

from __future__ import annotations

import json

import pytest

from apps.audit.models import AuditEvent
from apps.audit.selectors import verify_chain
from apps.runs import services, worker
from apps.runs.models import ToolCall
from tests.runs.conftest import LOOK_UP

SECRET = "sk-live0123456789abcdefXYZ"
PLEASE_REFUND = {"tool": "orders.refund_order",
                 "args": {"order_id": "A-1001", "amount_cents": 500, "request_id": f"refund-{SECRET}"}}
TOO_MUCH = {"tool": "orders.refund_order", "args": {"order_id": "A-1001", "amount_cents": 999999, "request_id": "r2"}}


def _run(desk, script, name="Audited"):
    clerk = desk.agent(f"{name} clerk", [*script, {"say": "Done.\nSTATUS: done\nREASON: ok"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"},
                        {"tool": "orders.refund_order", "policy": "auto"}])
    crew = desk.sequential(name, [("work", clerk, "Work on {order_id}.", [])])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    return worker.drive_run(run_id=run.id)


def _calls_audited(run) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(org_id=run.org_id, action="run.tool_call").order_by("seq"))


@pytest.mark.django_db
def test_each_call_a_run_makes_has_one_audit_row_with_agent_principal_tool_redacted_arguments_and_state(desk):
    run = _run(desk, [{"call": [LOOK_UP]}, {"call": [PLEASE_REFUND]}, {"call": [TOO_MUCH]}])
    assert run.status == "succeeded", run.error
    rows = list(ToolCall.objects.filter(run=run).order_by("created_at", "position"))
    events = _calls_audited(run)
    assert [(e.target_id, e.data["state"]) for e in events] == [(str(r.id), r.state) for r in rows]
    assert [e.data["state"] for e in events] == ["succeeded", "succeeded", "failed"]
    lookup, refund, refused = events
    assert lookup.actor_label == "agent:Audited clerk" and lookup.data["agent_id"]
    assert lookup.data["principal"] == "mcp_server:orders"
    assert lookup.data["tool"] == lookup.target_label == "orders.get_order_status"
    assert lookup.data["arguments"] == {"order_id": "A-1001"} and lookup.data["run_id"] == str(run.id)
    assert refund.data["arguments"]["amount_cents"] == 500
    assert SECRET not in json.dumps(refund.data) and "[redacted]" in refund.data["arguments"]["request_id"]
    assert refused.data["error_class"] == "business"
    assert verify_chain(org_id=run.org_id).intact  # chained with the run's other audit rows
