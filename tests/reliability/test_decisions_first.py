"""Decisions go out first: a worker takes a person's decision before any run's next steps, and the task that
carries it runs the decided calls and no more (apps/core/queue_order.py, apps.runs.tasks.resume_run). A storm of
decisions is not stuck behind the runs they let go on."""

from __future__ import annotations

import pytest

from apps.agents import services as agent_services
from apps.approvals.models import ApprovalRequest
from apps.crews import services as crew_services
from apps.runs import decisions
from apps.runs.models import CallState, Run, ToolCall
from tests.reliability.conftest import SLOW, TAG_INPUT, check_invariants, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


def held_refund_crew(desk):
    """One agent: one slow refund that waits for a person, then an answer."""
    clerk = agent_services.create_agent(
        actor=desk.actor, name="Held clerk", connection_id=desk.connection.id,
        script=[{"call": [{"tool": SLOW, "args": {"order_id": "A-1003", "amount_cents": 1,
                                                  "request_id": "{{input.tag}}-1"}}]},
                {"say": "Refunded.\nSTATUS: done\nREASON: ok"}],
        grants=[{"tool": SLOW, "policy": "approve"}], max_steps=4)
    return crew_services.create_crew(
        actor=desk.actor, name="Held refunds", process="sequential", inputs=TAG_INPUT,
        tasks=[{"name": "refund", "agent_id": clerk.id, "description": "Refund for {tag}.", "context": []}])


@pytest.mark.parametrize("slow_seconds", [0.3])
def test_every_decided_call_goes_out_before_the_runs_they_let_go_on_take_a_step(cluster, slow_desk):
    crew, tags = held_refund_crew(slow_desk), [f"storm{n}" for n in range(5)]
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

