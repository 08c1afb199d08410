"""SIGKILL of a worker during the model call that follows a write, with a real worker and a model that
takes its time (the fake OpenAI server in this process). A write's result is committed when it arrives,
before the next model call starts: the write that happened stays `succeeded`, and the worker that takes
the run over makes that model call again instead of asking a person whether the write happened."""

from __future__ import annotations

import os
import signal

import pytest

from apps.agents import services as agent_services
from apps.crews import services as crew_services
from apps.runs.models import CallState, ToolCall
from tests.agents.fake_llm import FakeLLM
from tests.reliability.conftest import SLOW, TAG_INPUT, check_invariants, lease_runs_out, wait_status, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = ("orders__slow_refund", {"order_id": "A-1003", "amount_cents": 1, "request_id": "model-1"})


def _model_crew(desk, fake: FakeLLM):
    connection = agent_services.create_connection(actor=desk.actor, name="Slow model", provider="openai_compatible",
                                                  base_url=fake.base_url, api_key="sk-test-123456")
    clerk = agent_services.create_agent(actor=desk.actor, name="Model clerk", connection_id=connection.id,
                                        model="gpt-4o-mini", grants=[{"tool": SLOW, "policy": "auto"}])
    return crew_services.create_crew(actor=desk.actor, name="Model kill", process="sequential", inputs=TAG_INPUT,
                                     tasks=[{"name": "refund", "agent_id": clerk.id, "description": "Refund {tag}."}])


@pytest.mark.parametrize("slow_seconds", [0.1])
def test_a_worker_killed_during_the_model_call_after_a_write_leaves_the_write_succeeded(cluster, slow_desk):
    with FakeLLM("openai") as fake:
        fake.replies = [(200, {"tool_call": REFUND}),
                        (200, {"text": "never seen", "after_s": 30}),  # the worker dies while it waits for this
                        (200, {"text": "Refunded.\nSTATUS: done\nREASON: the refund went through"})]
        first = cluster.worker(concurrency=1)
        cluster.beat()
        run = slow_desk.start(_model_crew(slow_desk, fake), "model")
        wait_until(lambda: len(fake.requests) == 2, 60, "the model call after the refund")
        row = ToolCall.objects.get(run=run, qualified_name=SLOW)
        assert row.state == CallState.SUCCEEDED, "the refund's result is stored before the next model call"
        assert "Refunded 1 cents" in row.result["text"]
        os.killpg(first.pid, signal.SIGKILL)  # the whole worker, during that model call
        cluster.worker()
        lease_runs_out(run.id)
        run = wait_status(run.id, {"waiting", "failed", "succeeded"}, timeout=60)
    assert run.status == "succeeded", f"{run.status}: {run.error}"  # nobody was asked whether the refund happened
    row.refresh_from_db()
    assert row.state == CallState.SUCCEEDED and row.attempts == 1 and not row.resolved_by
    assert not ToolCall.objects.filter(run=run, state=CallState.UNKNOWN).exists()
    assert slow_desk.executed("model") == {"model-1": 1}
    assert len(fake.requests) == 3  # the interrupted model call was made again, the refund was not
    check_invariants(run.id, slow_desk, "model")
