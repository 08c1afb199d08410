"""Changes another process makes under a running run reach the engine at its next check: a cancel at the
next step boundary, a quarantined tool at the next dispatch. While a task drives a run the engine reads the
run row and the tools' rows only when Postgres notifies a change (apps/runs/store/notices.py), so these run
in autocommit (`transaction=True`), as a worker does: the changes commit from another connection mid-run."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from apps.approvals.definition_changes import inbox
from apps.registry import services as registry_services
from apps.registry.models import Tool
from apps.registry.pool import PendingCall
from apps.runs import services
from apps.runs import worker as run_worker
from apps.runs.models import Run, RunStep, ToolCall
from apps.runs.store.notices import REGISTRY_CHANNEL, ChangeNotices, Changes
from apps.runs.store.reads import live_tool_read, run_read

pytestmark = pytest.mark.django_db(transaction=True)


def lookups(*orders: str) -> list[dict]:
    return [{"call": [{"tool": "orders.get_order_status", "args": {"order_id": order}}]} for order in orders]


def crew_of(desk, script: list[dict]):
    agent = desk.agent("Looker", [*script, {"say": "Looked.\nSTATUS: done\nREASON: ok"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    return desk.sequential("Lookups", [("look", agent, "Look up {order_id}.", [])])


def in_another_connection(change) -> None:
    """`change()` committed by another connection (another thread's), as a person's request would be."""
    failures = []

    def run() -> None:
        try:
            change()
        except Exception as exc:  # surfaced in the test, not lost in the thread
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and not failures, failures


def notify_registry_of(org: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [REGISTRY_CHANNEL, org])


def during_first_tool_call(monkeypatch, change) -> None:
    """Runs `change` in another connection while the run's first tool call is in flight."""
    real, done = PendingCall.result, []

    def result(self):  # where every call's answer is waited for (reads sent early too)
        answer = real(self)
        if not done:
            done.append(True)
            in_another_connection(change)
            time.sleep(0.2)  # the rest of the call: its notice arrives meanwhile, as a real change's would
        return answer

    monkeypatch.setattr(PendingCall, "result", result)


def test_a_cancel_during_a_tool_call_stops_the_run_before_its_next_model_call(desk, monkeypatch):
    crew = crew_of(desk, lookups("A-1001", "A-1002", "A-1003"))
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    during_first_tool_call(monkeypatch, lambda: services.cancel_run(actor=desk.actor, run_id=run.id))
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "cancelled" and run.cancel_requested
    assert ToolCall.objects.filter(run=run).count() == 1  # the call in flight finished; no other was made
    assert RunStep.objects.filter(run=run, kind="llm").count() == 1  # and the model was not asked again


def test_a_cancel_committed_just_after_the_claim_stops_the_run_at_its_first_step(desk, monkeypatch):
    crew = crew_of(desk, lookups("A-1001", "A-1002"))
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    advance = run_worker.advance  # the engine's entry point, handed the claimed run's store

    def claimed_then_cancelled(*args, **kwargs):  # the claim and its LISTEN committed, no step made yet
        in_another_connection(lambda: services.cancel_run(actor=desk.actor, run_id=run.id))
        time.sleep(0.2)  # its notice is on this connection's socket before the first step looks
        return advance(*args, **kwargs)

    monkeypatch.setattr(run_worker, "advance", claimed_then_cancelled)
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "cancelled"
    assert not RunStep.objects.filter(run=run).exists()  # stopped at the first boundary: no turn, no model call


def test_a_tool_quarantined_during_a_run_is_refused_at_its_next_call(desk, monkeypatch):
    crew = crew_of(desk, lookups("A-1001", "A-1002"))
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    tool = Tool.objects.get(org_id=desk.actor.org_id, qualified_name="orders.get_order_status")
    during_first_tool_call(monkeypatch, lambda: registry_services.update_tool(actor=desk.actor, tool_id=tool.id,
                                                                              state="quarantined", review=inbox))
    run = run_worker.drive_run(run_id=run.id)
    first, second = ToolCall.objects.filter(run=run).order_by("created_at")
    assert first.state == "succeeded"
    assert second.state == "denied" and second.dispatched_at is None and "quarantined" in second.reason


def test_a_run_driven_in_a_worker_reads_its_row_at_the_claim_and_its_tool_once_not_every_step(desk):
    crew = crew_of(desk, lookups("A-1001", "A-1002", "A-1003"))
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    with CaptureQueriesContext(connection) as queries:
        run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and ToolCall.objects.filter(run=run, state="succeeded").count() == 3
    def times(sql: str) -> int:  # the captured statements have their parameters filled in
        return sum(q["sql"].startswith(sql.split(" WHERE ")[0] + " WHERE ") for q in queries.captured_queries)

    assert times(run_read()[1]) == 0  # the claim read it, with the LISTEN; then only when notified
    assert times(live_tool_read()[2]) == 1


def heard_until(notices: ChangeNotices, what: str) -> Changes:
    """Every change notified until `what` ("run" or "registry") was: notices arrive a moment after their
    commit, and in commit order, so what was notified before the one awaited has arrived too."""
    run = registry = False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        changes = notices.changes()
        run, registry = run or changes.run, registry or changes.registry
        if getattr(changes, what):
            return Changes(run=run, registry=registry)
        time.sleep(0.01)
    raise AssertionError(f"no {what} notice within 10 s")


def test_notices_name_other_connections_changes_to_this_run_and_this_org_only(desk):
    crew = crew_of(desk, [])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    other = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1002", "amount_cents": 1},
                               enqueue=False)
    notices = ChangeNotices(run.id, run.org_id)
    assert notices.listen()
    Run.objects.filter(id=run.id).update(status="running")  # this connection's own change: the store knows it
    in_another_connection(lambda: Run.objects.filter(id=other.id).update(cancel_requested=True))  # another run's
    in_another_connection(lambda: Tool.objects.filter(org_id=run.org_id).update(state="disabled"))
    assert heard_until(notices, "registry") == Changes(run=False, registry=True)
    in_another_connection(lambda: notify_registry_of("0" * 32))  # as the trigger does for another org's tool
    in_another_connection(lambda: Run.objects.filter(id=run.id).update(cancel_requested=True))
    assert heard_until(notices, "run") == Changes(run=True, registry=False)
    assert notices.changes() == Changes(run=False, registry=False)  # told once
    notices.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_listening_channels()")
        assert cursor.fetchone()[0] == 0  # a pooled connection keeps no channel after the task
    assert notices.changes() == Changes(run=True, registry=True)  # no longer listening: everything counts


def test_with_notices_off_a_run_reads_its_row_every_step_and_still_stops_on_a_cancel(desk, monkeypatch, settings):
    settings.AIRLOCK_CHANGE_NOTICES = False  # behind a pooler in transaction mode
    crew = crew_of(desk, lookups("A-1001", "A-1002", "A-1003"))
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    assert not ChangeNotices(run.id, run.org_id).listen()
    during_first_tool_call(monkeypatch, lambda: services.cancel_run(actor=desk.actor, run_id=run.id))
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "cancelled" and ToolCall.objects.filter(run=run).count() == 1
