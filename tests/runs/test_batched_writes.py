"""A step's writes go to Postgres as one batch (apps.core.db.pipeline), and a batch cannot tell a row
count or raise at its statement. This pins what the batch must still refuse: a step of a worker that
lost the run commits nothing, even when a read it sent with the batch already left; a call a person let go
is not sent by a worker whose `dispatched` batch finds it dispatched by another; and a write never leaves
before its `dispatched` is committed. (A budget crossed by a batched model call:
tests/runs/test_budgets.py.)"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.costs.models import UsageRecord
from apps.registry.pool import PendingCall, Pool
from apps.runs import decisions, services
from apps.runs import worker as run_worker
from apps.runs.engine import tools as engine_tools
from apps.runs.models import Run, RunEvent, RunStep, ToolCall
from apps.runs.store.run_store import RunStore
from tests.runs.conftest import LOOK_UP

# Real transactions: the rolled-back step must be rolled back for good, as on a worker.
pytestmark = pytest.mark.django_db(transaction=True)

A1001 = {"order_id": "A-1001", "amount_cents": 500}


def _looker(desk, name: str):
    agent = desk.agent(name, [{"call": [LOOK_UP]}, {"say": "Found it.\nSTATUS: done\nREASON: looked"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    return desk.sequential(name, [("look", agent, "Look up order {order_id}.", [])])


def _taken_over_during_calls(monkeypatch) -> list[str]:
    """Every tool call's answer arrives after another worker took the run over (the sweeper's takeover: the
    call made `unknown`). Returns the names of the calls that left, in order."""
    started, original_start, original_result = [], Pool.start_call, PendingCall.result

    def start_call(self, spec, tool_name, *args, **kwargs):
        started.append(tool_name)
        return original_start(self, spec, tool_name, *args, **kwargs)

    def taken_over_meanwhile(self):
        result = original_result(self)
        ToolCall.objects.filter(state="dispatched").update(state="unknown")
        return result

    monkeypatch.setattr(Pool, "start_call", start_call)
    monkeypatch.setattr(PendingCall, "result", taken_over_meanwhile)
    return started


def test_a_worker_whose_call_was_taken_over_commits_nothing_of_its_next_step(desk, monkeypatch):
    """While the call was out, another worker took the run over and made the call `unknown` (the sweeper's
    takeover). The late worker's completion goes out in its next step's batch: the batch must roll back
    (LeaseLost), not record a result over `unknown` and carry on with the next model call."""
    _taken_over_during_calls(monkeypatch)
    run = services.start_run(actor=desk.actor, crew_id=_looker(desk, "Taken over").id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)

    assert run.status == "running" and not run.error  # the run is the other worker's to finish
    row = ToolCall.objects.get(run=run)
    assert row.state == "unknown" and row.result is None and row.finished_at is None
    # The model call after the tool call was batched with the completion: none of it stayed.
    assert RunStep.objects.filter(run=run, kind="llm").count() == 1
    assert UsageRecord.objects.filter(run_id=run.id).count() == 1
    assert not RunEvent.objects.filter(run=run, type__in=["tool.completed", "run.finished"]).exists()
    assert Run.objects.get(id=run.id).tokens_in == UsageRecord.objects.get(run_id=run.id).input_tokens



def test_a_read_sent_with_a_batch_that_fails_leaves_no_trace(desk, monkeypatch):
    """A read's request leaves with the batch that commits its `dispatched`, before that batch's answer
    (apps.runs.engine.tools.EarlyRead). When that batch fails (here: it also carries the completion of the
    call before, which another worker made `unknown` meanwhile), the read may have gone out (unless the
    failure came back before the batch's last statement was written) but nothing of it may stay: no ledger
    row, no model call, no result for the model."""
    started = _taken_over_during_calls(monkeypatch)
    second = {"tool": "orders.get_order_status", "args": {"order_id": "A-1002"}}
    agent = desk.agent("Two reads", [{"call": [LOOK_UP]}, {"call": [second]},
                                     {"say": "Found both.\nSTATUS: done\nREASON: looked"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Two reads", [("look", agent, "Look up order {order_id}.", [])])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)

    assert started in (["get_order_status"], ["get_order_status", "get_order_status"])
    assert run.status == "running" and not run.error  # the run is the other worker's to finish
    assert list(ToolCall.objects.filter(run=run).values_list("state", "arguments")) == [
        ("unknown", {"order_id": "A-1001"})]
    assert RunStep.objects.filter(run=run, kind="llm").count() == 1
    assert not RunEvent.objects.filter(run=run, type__in=["tool.completed", "run.finished"]).exists()


def test_an_approved_call_another_worker_dispatched_first_is_not_sent_again(desk, approver, monkeypatch):
    """A resume sends an approved call's `held -> dispatched` in the batch with its COMMIT, not a round trip
    before it. Another worker that took the run over dispatched the call while this one was deciding its own
    dispatch: this batch must roll back and its request must never leave (the call goes out once), and the run
    stays the other worker's."""
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)
    held = ToolCall.objects.get(run=run, qualified_name="orders.refund_order", state="held")
    decisions.decide_approval(actor=member_actor(approver), approval_id=held.approval_id, decision="approve")
    started, original_start, original_problem = [], Pool.start_call, engine_tools.url_problem
    theirs = timezone.now()

    def start_call(self, spec, tool_name, *args, **kwargs):
        started.append(tool_name)
        return original_start(self, spec, tool_name, *args, **kwargs)

    def dispatched_by_the_other_worker(arguments):  # the dispatch's last check before its batch
        ToolCall.objects.filter(id=held.id).update(state="dispatched", dispatched_at=theirs, attempts=1)
        return original_problem(arguments)

    monkeypatch.setattr(Pool, "start_call", start_call)
    monkeypatch.setattr(engine_tools, "url_problem", dispatched_by_the_other_worker)
    assert run_worker.advance_run(run_id=run.id, max_steps=1) == "lost"  # as the resume task runs it

    assert started == [] and desk.refunds() == {}  # this worker sent nothing
    held.refresh_from_db()
    assert (held.state, held.dispatched_at, held.attempts) == ("dispatched", theirs, 1)  # the other worker's
    assert not RunEvent.objects.filter(run=run, type="tool.dispatched", data__tool_call_id=str(held.id)).exists()
    assert Run.objects.get(id=run.id).status == "running"  # the other worker's to finish


def test_a_write_leaves_only_once_its_dispatched_is_committed(desk, monkeypatch):
    """Writes keep the strict order of the ledger (ARCHITECTURE section 4): when the request leaves, the
    transaction that made the call `dispatched` is over (committed and answered), and the row says so.
    A read's request may leave inside it, with the commit on its way."""
    seen = []
    original_start = Pool.start_call

    def start_call(self, spec, tool_name, *args, **kwargs):
        inside = connection.in_atomic_block
        state = None if inside else ToolCall.objects.filter(qualified_name=f"orders.{tool_name}").latest(
            "created_at").state
        seen.append((tool_name, inside, state))
        return original_start(self, spec, tool_name, *args, **kwargs)

    monkeypatch.setattr(Pool, "start_call", start_call)
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk(refund_policy="auto").id, inputs=A1001,
                             enqueue=False)
    run = run_worker.drive_run(run_id=run.id)

    assert run.status == "succeeded", run.error
    assert [s for s in seen if s[0] == "refund_order"] == [("refund_order", False, "dispatched")]
    assert len(desk.refunds()) == 1


def test_a_decision_that_holds_the_run_while_it_is_parked_is_seen_and_the_run_goes_on(desk, approver, monkeypatch):
    """A step held the refund and is about to park the run; a person's decision lands just then and holds the run
    row (as every decision does) until it commits. The park waits for that lock, and what it counts as pending
    must be read after it: counted from before (one statement, or one snapshot, for the lock and the counts) the
    run would wait for a decision already made, with nobody left to resume it."""
    original_wait = RunStore.wait
    locked, seen = threading.Event(), []

    def person_decides_meanwhile(store, reason):
        held = ToolCall.objects.get(run_id=store.run_id, state="held")

        def decide():
            with transaction.atomic():
                Run.objects.select_for_update().get(id=store.run_id)
                locked.set()
                threading.Event().wait(0.5)  # the park's lock waits for this transaction
                decisions.decide_approval(actor=member_actor(approver), approval_id=held.approval_id,
                                          decision="approve")
            connection.close()

        person = threading.Thread(target=decide)
        person.start()
        assert locked.wait(10)
        seen.append(original_wait(store, reason))
        person.join(10)
        return seen[-1]

    monkeypatch.setattr(RunStore, "wait", person_decides_meanwhile)
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)

    assert seen == [False]  # nothing was pending once the park had the lock: the run went on
    assert run.status == "succeeded", run.error
    assert len(desk.refunds()) == 1  # the approved refund ran, once
    assert not RunEvent.objects.filter(run=run, type="run.waiting").exists()
