"""Redis (broker and channel layer) stopped and restarted under running runs. The private Redis keeps
nothing across a restart, so every queued message is lost: beat's sweeper must re-enqueue what the
database says is queued or lost, and workers must reconnect."""

from __future__ import annotations

import time

import pytest

from apps.runs.models import ToolCall
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
