"""Redis (broker and channel layer) stopped and restarted under running runs. The private Redis keeps
nothing across a restart, so every queued message is lost: beat's sweeper must re-enqueue what the
database says is queued or lost, and workers must reconnect."""

from __future__ import annotations

import time

import pytest

from apps.runs.models import Run, ToolCall
from tests.reliability.conftest import SLOW, settle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("slow_seconds", [0.5])
def test_runs_started_before_redis_restarts_all_finish_and_nothing_runs_twice(cluster, slow_desk, broker):
    cluster.lease_s = 8  # the sweeper re-enqueues queued runs untouched for a lease: their messages are gone
    cluster.worker(concurrency=2)
    cluster.beat()
    crew = slow_desk.crew("Through a Redis restart", slow_calls=4)
    runs = [slow_desk.start(crew, f"redis{n}") for n in range(4)]
    ids = [r.id for r in runs]
    wait_until(lambda: ToolCall.objects.filter(run_id__in=ids, qualified_name=SLOW).exclude(dispatched_at=None)
               .values("run_id").distinct().count() >= 2, 60, "two runs making slow refunds")

    broker.stop()  # SIGTERM with persistence off: queues, unacked messages and channel groups are gone
    time.sleep(4)
    broker.start()

    for n, run in enumerate(runs):
        done = settle(run.id, slow_desk, f"redis{n}", timeout=120)
        assert done.status == "succeeded", done.error
        assert slow_desk.executed(f"redis{n}") == {f"redis{n}-{k}": 1 for k in range(1, 5)}


def test_one_run_whose_message_was_lost_is_found_while_the_workers_stay_busy(cluster, slow_desk, broker):
    """One queued run with no message (Redis lost it, or its enqueue failed after the commit) beside a run the
    workers are busy with. The sweep runs on a worker that holds its own message unacknowledged, and the busy
    run's: neither is the lost run's, so the lost run is enqueued again within a period or two, not left queued
    until the workers fall idle."""
    from apps.runs import services

    cluster.lease_s = 4
    cluster.worker(concurrency=2)
    cluster.beat()
    busy = slow_desk.start(slow_desk.crew("Busy", slow_calls=12), "busy")
    wait_until(lambda: ToolCall.objects.filter(run_id=busy.id, qualified_name=SLOW).exclude(dispatched_at=None)
               .exists(), 60, "the busy run making slow refunds")
    lost = services.start_run(actor=slow_desk.actor, crew_id=slow_desk.crew("Lost", slow_calls=1).id,
                              inputs={"tag": "lost"}, enqueue=False)

    done = settle(lost.id, slow_desk, "lost", timeout=30)
    assert done.status == "succeeded", done.error
    assert slow_desk.executed("lost") == {"lost-1": 1}
    assert Run.objects.get(id=busy.id).status != "succeeded"  # found while the workers were still busy
    assert settle(busy.id, slow_desk, "busy", timeout=120).status == "succeeded"
