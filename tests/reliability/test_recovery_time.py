"""How soon a killed worker's run goes on, with production's lease, heartbeat and sweep timings.

A worker SIGKILLed mid-call, between steps or right after a person's decision: another worker takes the
run over (its `run.recovered` event) within RECOVERY_LIMIT_S of the kill, and still nothing is executed
twice (a write in flight is put to a person; a read in flight is simply made again). A live worker keeps
its lease through a call longer than the lease (the heartbeat), and one stuck past the cap loses it.
Each test prints the time it measured.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.crews import services as crew_services
from apps.runs import decisions, services
from apps.runs.models import CallState, Run, RunEvent, ToolCall
from tests.reliability.conftest import (
    SLOW,
    TAG_INPUT,
    check_invariants,
    settle,
    wait_for_log,
    wait_in_flight,
    wait_status,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

RECOVERY_LIMIT_S = 10.0
SLOW_LOOKUP = "orders.slow_lookup"


def kill_worker_driving(run_id) -> float:
    """SIGKILLs the whole worker (main process, pool, the MCP servers it started) whose pool process holds
    the run's lease: a lost machine. Returns when (unix time)."""
    pid = int(Run.objects.get(id=run_id).lease_owner.split(":")[1])
    group = os.getpgid(pid)
    killed_at = time.time()
    os.killpg(group, signal.SIGKILL)
    return killed_at


def recovered_after(run_id, killed_at: float) -> float:
    """Seconds from the kill to the run's `run.recovered` event (another worker claimed the lost run)."""
    after = datetime.fromtimestamp(killed_at, tz=UTC)
    event = wait_until(lambda: RunEvent.objects.filter(run_id=run_id, type="run.recovered", at__gt=after).first(),
                       60, f"run {run_id} to be taken over", interval=0.05)
    return event.at.timestamp() - killed_at


def killed_once(kill_file) -> float:
    """When the kill-once switch (tests/reliability/faultapp.py) fired."""
    kills = wait_until(lambda: kill_file.with_name(kill_file.name + ".kills").exists()
                       and kill_file.with_name(kill_file.name + ".kills").read_text().split(), 60, "the kill")
    return float(kills[2])


def report(what: str, seconds: float) -> None:
    print(f"\nrecovery after a worker killed {what}: {seconds:.1f} s (limit {RECOVERY_LIMIT_S:.0f} s)")
    assert 0 < seconds < RECOVERY_LIMIT_S, f"taken over {seconds:.1f} s after the kill"


def reads(desk, tag: str) -> Counter:
    return Counter(r for r in desk.store().get("slow_reads", []) if r.startswith(f"{tag}-"))


def lookup_then_refund_crew(desk, name: str):
    """A slow lookup (`<tag>-read`), then a slow refund (`<tag>-1`), then done."""
    clerk = agent_services.create_agent(
        actor=desk.actor, name=f"{name} clerk", connection_id=desk.connection.id,
        script=[{"call": [{"tool": SLOW_LOOKUP, "args": {"order_id": "A-1003", "request_id": "{{input.tag}}-read"}}]},
                {"call": [{"tool": SLOW, "args": {"order_id": "A-1003", "amount_cents": 1,
                                                  "request_id": "{{input.tag}}-1"}}]},
                {"say": "Looked and refunded.\nSTATUS: done\nREASON: ok"}],
        grants=[{"tool": SLOW_LOOKUP, "policy": "auto"}, {"tool": SLOW, "policy": "auto"}], max_steps=6)
    return crew_services.create_crew(
        actor=desk.actor, name=name, process="sequential", inputs=TAG_INPUT,
        tasks=[{"name": "look", "agent_id": clerk.id, "description": "Look and refund for {tag}.", "context": []}])


def test_a_worker_killed_mid_write_is_taken_over_within_seconds_and_the_write_put_to_a_person(cluster, slow_desk):
    cluster.worker(concurrency=1)
    cluster.worker(concurrency=1)  # the other machine, already up
    cluster.beat()
    run = slow_desk.start(slow_desk.crew("Lost mid-write", slow_calls=3), "write")
    wait_in_flight(slow_desk, run.id, "write", n=2)
    killed_at = kill_worker_driving(run.id)
    report("mid-call (a write in flight)", recovered_after(run.id, killed_at))

    run = wait_status(run.id, {"waiting", "failed", "succeeded"})
    assert run.status == "waiting", run.error
    assert ToolCall.objects.get(run=run, arguments__request_id="write-2").state == CallState.UNKNOWN
    run = settle(run.id, slow_desk, "write")  # a person confirms #2 happened; nothing is sent again
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("write") == {"write-1": 1, "write-2": 1, "write-3": 1}


def test_a_worker_killed_mid_read_is_taken_over_and_the_read_made_again_without_asking_anyone(cluster, slow_desk):
    cluster.worker(concurrency=1)
    cluster.worker(concurrency=1)
    cluster.beat()
    run = services.start_run(actor=slow_desk.actor, crew_id=lookup_then_refund_crew(slow_desk, "Lost mid-read").id,
                             inputs={"tag": "read"})
    wait_until(lambda: ToolCall.objects.filter(run=run, qualified_name=SLOW_LOOKUP, state=CallState.DISPATCHED)
               .exists() and reads(slow_desk, "read"), 60, "the slow lookup in flight", interval=0.05)
    killed_at = kill_worker_driving(run.id)
    report("mid-call (a read in flight)", recovered_after(run.id, killed_at))

    run = wait_status(run.id, {"waiting", "failed", "succeeded"})
    assert run.status == "succeeded", run.error  # nobody was asked
    assert not RunEvent.objects.filter(run=run, type__in=["tool.unknown", "run.waiting"]).exists()
    lookup = ToolCall.objects.get(run=run, qualified_name=SLOW_LOOKUP)
    assert lookup.state == CallState.SUCCEEDED and lookup.attempts == 2
    assert reads(slow_desk, "read") == {"read-read": 2}  # made again: a read changes nothing
    assert slow_desk.executed("read") == {"read-1": 1}
    check_invariants(run.id, slow_desk, "read")


def test_a_worker_killed_between_steps_is_taken_over_within_seconds(cluster, slow_desk, tmp_path):
    kill_file = tmp_path / "kill-once"
    cluster.worker(concurrency=1, FAULTS_KILL_ONCE_FILE=str(kill_file))
    cluster.worker(concurrency=1, FAULTS_KILL_ONCE_FILE=str(kill_file))
    cluster.beat()
    run = slow_desk.start(slow_desk.crew("Lost between steps", slow_calls=3), "steps")
    kill_file.write_text(f"{run.id} 4\n")  # after the turn's start, the lookup and refund #1 (a second away)
    report("between steps", recovered_after(run.id, killed_once(kill_file)))

    run = settle(run.id, slow_desk, "steps")
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("steps") == {"steps-1": 1, "steps-2": 1, "steps-3": 1}


def test_a_worker_killed_right_after_a_decision_is_taken_over_within_seconds(cluster, slow_desk, tmp_path, approver):
    kill_file = tmp_path / "kill-once"
    cluster.worker(concurrency=1, FAULTS_KILL_ONCE_FILE=str(kill_file))
    cluster.worker(concurrency=1, FAULTS_KILL_ONCE_FILE=str(kill_file))
    cluster.beat()
    run = slow_desk.start(slow_desk.held_crew("Lost after a decision"), "decided")
    run = wait_status(run.id, {"waiting"})
    request = ToolCall.objects.get(run=run, state=CallState.HELD).approval
    kill_file.write_text(f"{run.id} 1\n")  # the resuming worker dies right after its claim
    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    report("right after a decision", recovered_after(run.id, killed_once(kill_file)))

    run = settle(run.id, slow_desk, "decided")
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("decided") == {"decided-1": 1}  # the approved call was sent once, by the new worker


@pytest.mark.parametrize("slow_seconds", [12])
def test_a_live_worker_keeps_its_run_through_a_call_longer_than_the_lease(cluster, slow_desk):
    cluster.worker(concurrency=2)
    cluster.beat()
    run = slow_desk.start(slow_desk.crew("Long call", slow_calls=1, lookups=False), "long")
    run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=90)
    assert run.status == "succeeded", run.error
    assert run.deliveries == 0 and not RunEvent.objects.filter(run=run, type="run.recovered").exists()
    assert slow_desk.executed("long") == {"long-1": 1}
    check_invariants(run.id, slow_desk, "long")


@pytest.mark.parametrize("slow_seconds", [20])
def test_a_worker_stuck_past_the_cap_loses_the_run_to_another(cluster, slow_desk):
    first = cluster.worker(concurrency=1, AIRLOCK_RUN_STUCK_S="3")
    second = cluster.worker(concurrency=1, AIRLOCK_RUN_STUCK_S="3")
    cluster.beat()
    run = slow_desk.start(slow_desk.crew("Stuck call", slow_calls=1, lookups=False), "stuck")
    row = wait_in_flight(slow_desk, run.id, "stuck", n=1)
    sent_at = time.time()
    stuck = first if _pool_of(first, run.id) else second
    taken = recovered_after(run.id, sent_at)
    print(f"\na worker stuck in one call for more than 3 s lost its run {taken:.1f} s after the call left")
    assert taken < 3 + 2 + RECOVERY_LIMIT_S  # the cap (checked every heartbeat), a lease, a sweep: not 20 s
    run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=60)
    assert run.status == "waiting", run.error
    row.refresh_from_db()
    assert row.state == CallState.UNKNOWN
    wait_for_log(stuck, "no progress for 3 s")
    wait_for_log(stuck, "lease lost to another worker", timeout=40)  # its late result is not written over it
    row.refresh_from_db()
    assert row.state == CallState.UNKNOWN and row.result is None
    run = settle(run.id, slow_desk, "stuck", timeout=120)
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("stuck") == {"stuck-1": 1}


def _pool_of(worker, run_id) -> bool:
    """Whether the pool process holding the run's lease belongs to `worker` (its process group)."""
    pid = int(Run.objects.get(id=run_id).lease_owner.split(":")[1])
    return os.getpgid(pid) == worker.pid
