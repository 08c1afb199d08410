"""The sweeper and the claim, in-process: a lost worker's run is taken back once per lease, claimed by the next
worker with a `run.recovered` event, and the lost worker's store can no longer touch it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.runs import services
from apps.runs import worker as run_worker
from apps.runs.engine.errors import LeaseLost
from apps.runs.models import Run
from apps.runs.store.run_store import RunStore
from tests.runs.conftest import LOOK_UP

pytestmark = pytest.mark.django_db

LOST = "lost-host:4242:deadbeef"


def lost_run(desk) -> Run:
    """A run its worker was driving when it died: running, the lease expired a moment ago."""
    reader = desk.agent("Reader", [{"call": [LOOK_UP]}, {"say": "Looked.\nSTATUS: done\nREASON: ok"}],
                        [{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Lookups", [("look", reader, "Look up order {order_id}.", [])])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": "A-1001", "amount_cents": 1},
                             enqueue=False)
    Run.objects.filter(id=run.id).update(status="running", lease_owner=LOST,
                                         lease_expires_at=timezone.now() - timedelta(seconds=1))
    return Run.objects.get(id=run.id)


def test_a_lost_run_is_swept_once_per_lease_and_the_next_worker_takes_it_over(desk):
    run = lost_run(desk)
    assert run_worker.sweep_stuck_runs() == 1
    assert run_worker.sweep_stuck_runs() == 0  # not enqueued again at every sweep while the queue is busy
    swept = Run.objects.get(id=run.id)
    assert swept.lease_owner == "swept" and swept.lease_expires_at > timezone.now()

    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert run.deliveries == 1
    recovered = run.events.get(type="run.recovered")
    assert recovered.data["worker"] != LOST and recovered.seq < run.events.get(type="run.finished").seq


def test_the_lost_worker_can_no_longer_write_once_its_run_was_swept(desk):
    run = lost_run(desk)
    stale = RunStore(str(run.id), LOST)  # the worker comes back to life (a paused process, a partition)
    run_worker.sweep_stuck_runs()
    with pytest.raises(LeaseLost):
        stale.renew_lease()
    with pytest.raises(LeaseLost):
        stale.save_state(state={**run.state, "hijacked": True})
    assert "hijacked" not in Run.objects.get(id=run.id).state


def test_a_queued_run_whose_message_was_lost_is_enqueued_again_once_per_period(desk, settings):
    settings.AIRLOCK_RUN_REQUEUE_AFTER_S = 60
    run = lost_run(desk)
    Run.objects.filter(id=run.id).update(status="queued", lease_owner="", lease_expires_at=None,
                                         updated_at=timezone.now() - timedelta(seconds=61))
    assert run_worker.sweep_stuck_runs() == 1
    assert run_worker.sweep_stuck_runs() == 0  # not a message per sweep while it waits in a long queue
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
