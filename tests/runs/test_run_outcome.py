"""A run says what its tools did, beside what its agents said: a write that failed, was rejected or denied,
or whose outcome is unknown, flags the run (`attention`) in the runs list (filterable), its header, the API
and the `run.finished` webhook, whatever the agent answered (`STATUS: done` included)."""

from __future__ import annotations

import pytest

from apps.accounts.actors import member_actor
from apps.notifications import services as notifications
from apps.notifications.models import Notification
from apps.runs import decisions, services, worker
from apps.runs.models import ToolCall
from tests.conftest import signed_in
from tests.factories import add_member, token_for
from tests.runs.conftest import LOOK_UP

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}
BAD_LOOKUP = {"tool": "orders.get_order_status", "args": {"order_id": "NOPE"}}


def _start(desk, crew):
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    return worker.drive_run(run_id=run.id)


def _decide(desk, approver, run, decision, **values):
    request = ToolCall.objects.get(run=run, state="held").approval
    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision=decision, **values)
    return worker.drive_run(run_id=run.id)


def test_an_approved_write_the_tool_refused_flags_the_run_in_the_list_header_api_and_webhook(desk, approver, client,
                                                                                          org):
    notifications.create_webhook(actor=desk.actor, name="ops", url="https://hooks.example.com/airlock",
                                 events=["run.finished"])
    crew = desk.refund_desk()  # its refund agent answers "Refunded." with STATUS: done, whatever happened
    run = _decide(desk, approver, _start(desk, crew), "approve",
                  arguments={"order_id": "A-1001", "amount_cents": -500000, "request_id": "refund-A-1001"})
    assert run.status == "succeeded" and run.output == "Refunded."  # what the agent said
    assert [(a["tool"], a["state"]) for a in run.attention] == [("orders.refund_order", "failed")]
    assert "Cannot refund -500000 cents" in run.attention[0]["reason"]
    assert run.attention_summary == "1 write failed"
    clean = _start(desk, desk.sequential("Lookups", [("look", desk.agent("Looker", [
        {"call": [LOOK_UP]}, {"say": "Fine.\nSTATUS: done\nREASON: ok"}],
        [{"tool": "orders.get_order_status", "policy": "auto"}]), "Look.", [])]))
    assert clean.status == "succeeded" and clean.attention == []

    payload = Notification.objects.get(org=org, event="run.finished", payload__run_id=str(run.id)).payload
    assert payload["status"] == "succeeded" and payload["attention_summary"] == "1 write failed"
    assert payload["attention"][0]["tool"] == "orders.refund_order"

    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'viewer')}"}
    flagged = client.get("/api/v1/runs?attention=true", **headers).json()
    assert [r["id"] for r in flagged["items"]] == [str(run.id)]
    assert flagged["items"][0]["attention_summary"] == "1 write failed"
    others = client.get("/api/v1/runs?attention=false", **headers).json()
    assert [r["id"] for r in others["items"]] == [str(clean.id)]
    assert client.get(f"/api/v1/runs/{run.id}", **headers).json()["attention"][0]["state"] == "failed"

    signed_in(client, approver)
    page = client.get("/runs/?attention=on").content.decode()
    assert f"/runs/{run.id}/" in page and f"/runs/{clean.id}/" not in page and "1 write failed" in page
    header = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="run-attention"' in header and "Cannot refund -500000 cents" in header
    assert 'data-testid="run-attention"' not in client.get(f"/runs/{clean.id}/").content.decode()


def test_a_rejected_write_flags_the_run_and_a_failed_read_does_not(desk, approver):
    run = _decide(desk, approver, _start(desk, desk.refund_desk()), "reject", comment="not this one")
    assert run.status == "succeeded"
    assert [(a["tool"], a["state"]) for a in run.attention] == [("orders.refund_order", "rejected")]
    assert "not this one" in run.attention[0]["reason"] and run.attention_summary == "1 write rejected"

    looker = desk.agent("Bad looker", [{"call": [BAD_LOOKUP]}, {"say": "Fine.\nSTATUS: done\nREASON: ok"}],
                        [{"tool": "orders.get_order_status", "policy": "auto"}])
    reads = _start(desk, desk.sequential("Bad lookups", [("look", looker, "Look.", [])]))
    assert ToolCall.objects.get(run=reads).state == "failed"
    assert reads.status == "succeeded" and reads.attention == []  # a lookup is not an action


def test_the_demo_refund_answer_quotes_what_the_order_desk_said_not_the_amount_asked_for(db, settings, tmp_path):
    from apps.accounts.models import Organization
    from apps.demo.services import seed_demo
    from apps.runs.models import Run

    settings.VAR_DIR = tmp_path
    seed_demo()
    org = Organization.objects.get(slug="demo")
    run = Run.objects.get(org_id=org.id)
    request = ToolCall.objects.get(run=run, state="held").approval
    person = member_actor(add_member(org, "approver"))  # not the person who started the run
    decisions.decide_approval(actor=person, approval_id=request.id, decision="approve",
                             arguments={**request.arguments, "amount_cents": -500000})
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and run.attention_summary == "1 write failed"
    assert "Cannot refund -500000 cents" in run.output and "Refunded" not in run.output


def test_a_run_cancelled_with_an_unknown_write_says_so_until_a_person_resolves_it(desk, approver):
    from tests.runs.test_unknown_calls import unknown_call

    run, row = unknown_call(desk, approver)
    services.cancel_run(actor=desk.actor, run_id=run.id)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.attention_summary == "1 write with an unknown outcome"
    assert run.attention[0]["tool_call_id"] == str(row.id)
    decisions.resolve_unknown_call(actor=member_actor(approver), tool_call_id=row.id, outcome="succeeded")
    run.refresh_from_db()
    assert run.attention == [] and run.attention_summary == ""
