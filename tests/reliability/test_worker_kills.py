"""SIGKILL of a worker mid-tool-call, with a real worker, beat and the slow order desk.

tests/runs/test_worker.py kills a pool process mid-step (between fast calls) and recovers it by
hand; here the kill lands while a slow write is in flight (its ledger row `dispatched`, the desk
already executing it), and beat's sweeper does the recovery.
"""

from __future__ import annotations

import os
import signal

import pytest

from apps.runs.models import CallState, Run, RunEvent, ToolCall
from tests.reliability.conftest import (
    SLOW,
    check_invariants,
    lease_runs_out,
    log_size,
    settle,
    wait_for_log,
    wait_in_flight,
    wait_status,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pool_process_killed_mid_tool_call_leaves_the_call_unknown_for_a_person(cluster, slow_desk):
    worker = cluster.worker()
    cluster.beat()
    crew = slow_desk.crew("Child kill", slow_calls=3)
    run = slow_desk.start(crew, "child")
    row = wait_in_flight(slow_desk, run.id, "child", n=2)
    pid = int(Run.objects.get(id=run.id).lease_owner.split(":")[1])  # the pool process executing the run
    seen = log_size(worker)
    os.kill(pid, signal.SIGKILL)
    # The redelivered task finds the lease alive and does nothing; once the lease runs out, beat's
    # sweeper hands the run to a pool process again, which finds the call in flight and never re-sends it.
    wait_for_log(worker, "'skipped'", after=seen)
    lease_runs_out(run.id)
    run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=60)
    assert run.status == "waiting", run.error
    row.refresh_from_db()
    assert row.state == CallState.UNKNOWN and row.attempts == 1
    assert "may or may not have happened" in row.error
    waiting = RunEvent.objects.filter(run=run, type="run.waiting").order_by("-seq").first()
    assert "unknown" in waiting.data["reason"] and waiting.data["unknown"] == 1
    assert run.deliveries >= 1  # taken over after the lease ran out
    check_invariants(run.id, slow_desk, "child")
    assert slow_desk.executed("child") == {"child-1": 1, "child-2": 1}  # #2 ran once, before the kill

    run = settle(run.id, slow_desk, "child")  # a person confirms #2 happened; the run goes on
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("child") == {"child-1": 1, "child-2": 1, "child-3": 1}
    assert ToolCall.objects.get(id=row.id).resolved_by


def test_the_worker_main_process_killed_mid_tool_call_loses_nothing(cluster, slow_desk):
    first = cluster.worker(concurrency=1)
    cluster.beat()
    crew = slow_desk.crew("Main kill", slow_calls=3)
    run = slow_desk.start(crew, "main")
    wait_in_flight(slow_desk, run.id, "main", n=2)
    os.kill(first.pid, signal.SIGKILL)  # the main process only: its pool process is orphaned
    cluster.worker()  # the supervisor starts a new worker
    lease_runs_out(run.id)
    run = settle(run.id, slow_desk, "main")
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("main") == {"main-1": 1, "main-2": 1, "main-3": 1}
    assert all(r.attempts == 1 for r in ToolCall.objects.filter(run=run, qualified_name=SLOW))


def test_a_whole_worker_killed_mid_tool_call_is_recovered_by_another(cluster, slow_desk):
    first = cluster.worker(concurrency=1)
    cluster.beat()
    crew = slow_desk.crew("Group kill", slow_calls=3)
    run = slow_desk.start(crew, "group")
    wait_in_flight(slow_desk, run.id, "group", n=2)
    os.killpg(first.pid, signal.SIGKILL)  # main, pool process and the MCP server it spawned: a lost machine
    cluster.worker()
    lease_runs_out(run.id)
    run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=60)
    assert run.status == "waiting", run.error
    assert ToolCall.objects.get(run=run, arguments__request_id="group-2").state == CallState.UNKNOWN
    run = settle(run.id, slow_desk, "group")
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("group") == {"group-1": 1, "group-2": 1, "group-3": 1}
