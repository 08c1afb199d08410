"""Runs on a real Celery worker (Redis broker when configured): started through the API, decided
through the API, a duplicate delivery, and a worker process killed with SIGKILL mid-run."""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest
from django.test import Client
from django.utils import timezone

from apps.runs import decisions, services, tasks
from apps.runs import worker as run_worker
from apps.runs.models import Run, RunEvent, ToolCall
from tests.factories import token_for, wait_for_run
from tests.runs.conftest import LOOK_UP

pytestmark = pytest.mark.django_db(transaction=True)


wait_for = functools.partial(wait_for_run, timeout=60)


def api(org, role):
    return Client(headers={"Authorization": f"Bearer {token_for(org, role)}"})


def test_a_run_started_through_the_api_waits_is_approved_and_refunds_once(worker, desk, org):
    crew = desk.refund_desk()
    builder, approver = api(org, "builder"), api(org, "approver")
    body = {"inputs": {"order_id": "A-1003", "amount_cents": 700}}
    first = builder.post(f"/api/v1/crews/{crew.id}/runs", body, content_type="application/json",
                         headers={"Idempotency-Key": "order-A-1003"})
    assert first.status_code == 201, first.content
    again = builder.post(f"/api/v1/crews/{crew.id}/runs", body, content_type="application/json",
                         headers={"Idempotency-Key": "order-A-1003"})
    assert again.json()["id"] == first.json()["id"]
    run_id = first.json()["id"]
    wait_for(run_id, {"waiting"})
    pending = approver.get("/api/v1/approvals?status=pending").json()
    assert pending["count"] == 1 and pending["items"][0]["tool"] == "orders.refund_order"
    approval_id = pending["items"][0]["id"]
    decided = approver.post(f"/api/v1/approvals/{approval_id}/decision", {"decision": "approve"},
                            content_type="application/json")
    assert decided.status_code == 200 and decided.json()["status"] == "approved"
    twice = approver.post(f"/api/v1/approvals/{approval_id}/decision", {"decision": "reject"},
                          content_type="application/json")
    assert twice.status_code == 409
    run = wait_for(run_id, {"succeeded", "failed", "limit_exceeded"})
    assert run.status == "succeeded", run.error
    assert list(desk.refunds()) == ["refund-A-1003"]
    events = builder.get(f"/api/v1/runs/{run_id}/events?after=3").json()
    assert [e["seq"] for e in events] == list(range(4, 4 + len(events)))
    assert events[-1]["type"] == "run.finished"
    listed = builder.get(f"/api/v1/runs?status=succeeded&crew={crew.id}").json()
    assert [r["id"] for r in listed["items"]] == [run_id]


def test_a_duplicate_execute_run_delivery_does_nothing(worker, desk):
    crew = desk.refund_desk()
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 5},
                             enqueue=False)
    tasks.execute_run.delay(str(run.id))
    tasks.execute_run.delay(str(run.id))
    run = wait_for(run.id, {"waiting"})
    time.sleep(1)
    assert tasks.execute_run.apply(args=[str(run.id)]).get() == "skipped"
    assert RunEvent.objects.filter(run=run, type="run.started").count() == 1
    assert ToolCall.objects.filter(run=run).count() == 3
    assert ToolCall.objects.filter(run=run, state="held").count() == 1


def test_a_worker_killed_mid_run_resumes_without_running_any_tool_twice(worker, desk, settings):
    refunds = [{"call": [{"tool": "orders.refund_order",
                          "args": {"order_id": "A-1003", "amount_cents": 10, "request_id": f"r-{n}"}}]}
               for n in range(1, 25)]
    clerk = desk.agent("Busy clerk", [{"call": [LOOK_UP]}, *refunds, {"say": "done"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"},
                        {"tool": "orders.refund_order", "policy": "auto"}], max_steps=40)
    crew = desk.sequential("Many refunds", [("go", clerk, "Refund {order_id}.", [])])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1003", "amount_cents": 1})
    deadline = time.monotonic() + 60
    while len(desk.refunds()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    owner = Run.objects.get(id=run.id).lease_owner
    assert owner, "the run should be in a worker's hands"
    os.kill(int(owner.split(":")[1]), signal.SIGKILL)  # the pool process executing the run
    time.sleep(1)
    # Time passes: the lease runs out, and beat's sweeper hands the run to a worker again.
    Run.objects.filter(id=run.id, status="running").update(lease_expires_at=timezone.now())
    time.sleep(0.1)
    run_worker.sweep_stuck_runs()
    run = wait_for(run.id, {"waiting", "succeeded", "failed"}, timeout=90)
    unknown = list(ToolCall.objects.filter(run=run, state="unknown"))
    for row in unknown:  # killed in flight: a person checks the desk and says what happened
        happened = row.arguments["request_id"] in desk.refunds()
        decisions.resolve_unknown_call(actor=desk.actor, tool_call_id=row.id,
                                      outcome="succeeded" if happened else "failed")
    run = wait_for(run.id, {"succeeded", "failed"}, timeout=90)
    assert run.status == "succeeded", run.error
    assert run.deliveries >= 1
    made = desk.refunds()
    assert all(not r.get("repeated") for r in made.values())
    succeeded = ToolCall.objects.filter(run=run, qualified_name="orders.refund_order", state="succeeded")
    assert {r.arguments["request_id"] for r in succeeded} == set(made)
    assert sum(r["amount_cents"] for r in made.values()) == 10 * len(made)
    assert desk.store()["orders"]["A-1003"]["refunded_cents"] == 10 * len(made)
    dispatched = ToolCall.objects.filter(run=run, qualified_name="orders.refund_order").exclude(dispatched_at=None)
    assert all(r.attempts == 1 for r in dispatched)


def test_the_session_s_worker_takes_no_task_while_a_test_that_did_not_ask_for_it_runs(worker, desk):
    """Tests that commit their rows and drive runs inline (or start workers of their own) run beside the
    session's worker once an earlier test started it; it must not take their tasks (tests/conftest.py)."""
    from tests.conftest import SESSION_WORKER

    [session_worker] = SESSION_WORKER
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id,
                             inputs={"order_id": "A-1001", "amount_cents": 5}, enqueue=False)
    try:
        session_worker.listen(False)  # as for a test that did not ask for the worker
        tasks.execute_run.delay(str(run.id))
        time.sleep(2)
        assert Run.objects.get(id=run.id).status == "queued"
        assert list(RunEvent.objects.filter(run=run).values_list("type", flat=True)) == ["run.queued"]
    finally:
        session_worker.listen(True)  # as for the next test that asks: the message left behind is dropped
    assert str(run.id) not in run_worker.runs_in_line()
    tasks.execute_run.delay(str(run.id))
    assert wait_for(run.id, {"waiting"}).status == "waiting"
