"""A worker whose lease ran out during a slow tool call (here a paused process: SIGSTOP, then SIGCONT):
another worker takes the run over and finds the call in flight. The first worker, when its call
returns, must neither record the result over the takeover nor end the run.

Found by these tests: the stale worker's `complete_call` silently did nothing, the engine then
failed on an assertion and `advance_run` marked the run failed ("Internal error: AssertionError:
dispatched") although another worker owned it. Now a lost transition raises LeaseLost and
`RunStore.finish`/`wait` refuse a store that no longer holds the lease.
"""

from __future__ import annotations

import os
import signal

import pytest

from apps.runs.models import CallState, Run, RunEvent, ToolCall
from tests.reliability.conftest import check_invariants, settle, wait_in_flight, wait_status, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("slow_seconds", [4])
def test_a_worker_that_lost_its_lease_mid_call_neither_records_the_call_nor_ends_the_run(cluster, slow_desk):
    worker = cluster.worker(concurrency=2)
    cluster.beat()
    crew = slow_desk.crew("Lease lost", slow_calls=2)
    run = slow_desk.start(crew, "lease")
    row = wait_in_flight(slow_desk, run.id, "lease", n=1)
    first_owner = Run.objects.get(id=run.id).lease_owner
    paused = int(first_owner.split(":")[1])
    os.kill(paused, signal.SIGSTOP)  # a paused process: its lease heartbeat stops too, and the lease runs out
    try:
        run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=30)
    finally:
        os.kill(paused, signal.SIGCONT)  # its call answers (the desk kept going) and it carries on
    assert run.status == "waiting", run.error
    wait_until(lambda: "lease lost to another worker" in worker.log.read_text(), 20, "the first worker to give up")
    run.refresh_from_db()
    assert run.status == "waiting" and not run.error
    assert not RunEvent.objects.filter(run=run, type="run.finished").exists()
    row.refresh_from_db()
    assert row.state == CallState.UNKNOWN and row.result is None  # the late result was not written over it
    assert Run.objects.get(id=run.id).deliveries == 1 and first_owner
    check_invariants(run.id, slow_desk, "lease")

    run = settle(run.id, slow_desk, "lease")
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("lease") == {"lease-1": 1, "lease-2": 1}
    assert all(r.attempts == 1 for r in ToolCall.objects.filter(run=run))
