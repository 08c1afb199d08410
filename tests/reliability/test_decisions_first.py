"""Decisions go out first: a worker takes a person's decision before any run's next steps, and the task that
carries it runs the decided calls and no more (apps/core/queue_order.py, apps.runs.tasks.resume_run). A storm of
decisions is not stuck behind the runs they let go on."""

from __future__ import annotations

import pytest

from apps.approvals.models import ApprovalRequest
from apps.runs import decisions
from apps.runs.models import CallState, Run, ToolCall
from tests.reliability.conftest import SLOW, check_invariants, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("slow_seconds", [0.3])
def test_every_decided_call_goes_out_before_the_runs_they_let_go_on_take_a_step(cluster, slow_desk):
    crew, tags = slow_desk.held_crew("Held refunds"), [f"storm{n}" for n in range(5)]
    cluster.worker(concurrency=1)  # one child: what it takes first is what waits least
    runs = [slow_desk.start(crew, tag) for tag in tags]
    for run in runs:
        wait_status(run.id, {"waiting"}, timeout=60)

    for run in runs:  # one after another, as people click; the first resume starts while the others arrive
        request = ApprovalRequest.objects.get(run_id=run.id)
        decisions.decide_approval(actor=slow_desk.actor, approval_id=request.id, decision="approve")

    ended = [wait_status(run.id, {"succeeded", "failed"}, timeout=90) for run in runs]
    calls = [ToolCall.objects.get(run_id=run.id, qualified_name=SLOW) for run in runs]
    assert all(call.state == CallState.SUCCEEDED for call in calls)
    last_sent = max(call.dispatched_at for call in calls)
    # Each resume task was the decided call alone: every decided call went out before any of these runs went on
    # to its next model call (its answer). One task per decision carrying the rest of its run, or a worker taking
    # `runs` and `resume` in turn, let the first runs finish before the last decisions went out.
    assert all(run.finished_at > last_sent for run in ended), [(r.finished_at, last_sent) for r in ended]
    for run, tag in zip(ended, tags, strict=True):
        assert check_invariants(run.id, slow_desk, tag).status == "succeeded"
    assert Run.objects.filter(id__in=[r.id for r in runs], status="succeeded").count() == 5

