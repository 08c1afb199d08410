"""A poison run: every delivery of its task kills the pool process that claimed it. After the
redelivery cap it fails with the reason instead of looping; other runs on the same worker finish."""

from __future__ import annotations

import pytest

from apps.runs.models import RunEvent
from tests.reliability.conftest import check_invariants, settle, wait_status, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_that_kills_its_worker_every_time_fails_after_the_cap_with_the_reason(cluster, slow_desk, tmp_path):
    poison = tmp_path / "poison"
    cluster.lease_s = 2
    crew = slow_desk.crew("Poison", slow_calls=1)
    bad = slow_desk.start(crew, "bad")
    poison.write_text(f"{bad.id}\n")
    cluster.worker(concurrency=2, FAULTS_POISON_FILE=str(poison))
    cluster.beat()
    good = slow_desk.start(crew, "good")

    bad = wait_status(bad.id, {"failed", "succeeded", "waiting"}, timeout=90)
    assert bad.status == "failed"
    kills = (tmp_path / "poison.kills").read_text().split("\n")
    kills = [k for k in kills if k]
    assert len(kills) == 4  # the first delivery and three redeliveries (AIRLOCK_RUN_MAX_DELIVERIES)
    assert bad.error == "The worker running this run was lost 4 times; giving up instead of trying again."
    assert bad.error_class == "internal" and bad.deliveries == 4
    finished = RunEvent.objects.get(run=bad, type="run.finished")
    assert finished.data["status"] == "failed" and "lost 4 times" in finished.data["error"]
    check_invariants(bad.id, slow_desk, "bad")
    assert slow_desk.executed("bad") == {}

    good = settle(good.id, slow_desk, "good")
    assert good.status == "succeeded", good.error
    wait_until(lambda: len([k for k in (tmp_path / "poison.kills").read_text().split("\n") if k]) == 4, 1,
               "no more kills")
