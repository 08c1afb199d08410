"""Beat down for a while, then back: a run whose pool process died while nobody swept is found once
beat runs again (its lease long expired), and finishes without repeating a call."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.utils import timezone

from apps.runs.models import Run
from tests.reliability.conftest import lease_runs_out, log_size, settle, wait_for_log, wait_in_flight

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_lost_while_beat_was_down_is_picked_up_when_beat_is_back(cluster, slow_desk):
    worker = cluster.worker(concurrency=2)  # no beat yet
    crew = slow_desk.crew("While beat is down", slow_calls=3)
    run = slow_desk.start(crew, "beat")
    wait_in_flight(slow_desk, run.id, "beat", n=2)
    seen = log_size(worker)
    os.kill(int(Run.objects.get(id=run.id).lease_owner.split(":")[1]), signal.SIGKILL)
    wait_for_log(worker, "'skipped'", after=seen)  # the redelivered task found the lease alive: nothing to do
    lease_runs_out(run.id)  # time passes
    time.sleep(3)
    stuck = Run.objects.get(id=run.id)
    assert stuck.status == "running" and stuck.lease_expires_at < timezone.now() and stuck.deliveries == 0

    cluster.beat()
    run = settle(run.id, slow_desk, "beat", timeout=60)
    assert run.status == "succeeded", run.error
    assert run.deliveries >= 1
    assert slow_desk.executed("beat") == {"beat-1": 1, "beat-2": 1, "beat-3": 1}
