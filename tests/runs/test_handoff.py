"""What a sequential task hands on (apps/runs/engine/handoff.py): the next agent's model request carries the
earlier task's conclusion (status, answer, evidence ids), not its transcript or tool results, and the agent
reads an earlier result in full with `run.get_result`, which reads this run's calls only. The model is a
local fake of the OpenAI API (the process edge); the order desk is the real stdio MCP server."""

from __future__ import annotations

import json
import re

import pytest

from apps.agents import services as agent_services
from apps.core.errors import ValidationFailed
from apps.registry import services as registry_services
from apps.runs import services
from apps.runs import worker as run_worker
from apps.runs.models import Run, ToolCall
from tests.agents.fake_llm import FakeLLM

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 500}
LOOK = (200, {"tool_call": ("orders__get_order_status", {"order_id": "A-1001"})})
TRIAGED = (200, {"text": "Refundable.\nSTATUS: done\nREASON: it was delivered"})
REVIEWED = (200, {"text": "Agreed.\nSTATUS: done\nREASON: read the triage"})
EVIDENCE_LINE = re.compile(r"^- ([0-9a-f-]{36}): orders\.get_order_status, [\d,]+ characters$", re.MULTILINE)


def pipeline(desk, fake, context=("triage",)) -> object:
    """Triage looks the order up; review receives triage's output (and may read its evidence)."""
    connection = agent_services.create_connection(actor=desk.actor, name="Fake model", provider="openai_compatible",
                                                  base_url=fake.base_url, api_key="sk-test-123456")
    triage = agent_services.create_agent(actor=desk.actor, name="Triage", connection_id=connection.id,
                                         model="gpt-4o-mini",
                                         grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    review = agent_services.create_agent(actor=desk.actor, name="Review", connection_id=connection.id,
                                         model="gpt-4o-mini", grants=[])
    return desk.sequential("Handed on", [("triage", triage, "Look up order {order_id}.", []),
                                         ("review", review, "Review the triage of {order_id}.", list(context))])


def start(desk, crew, inputs=A1001) -> Run:
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=inputs, enqueue=False)
    return run_worker.drive_run(run_id=run.id)


def tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def fetch_listed(body: dict) -> dict:
    """A model that reads the first evidence its prompt lists."""
    call_id = EVIDENCE_LINE.search(body["messages"][1]["content"]).group(1)
    return {"tool_call": ("run__get_result", {"call_id": call_id})}


def test_the_next_agent_receives_the_conclusion_and_its_evidence_not_the_transcript_or_the_tool_result(desk):
    with FakeLLM("openai") as fake:
        fake.replies = [LOOK, TRIAGED, REVIEWED]
        run = start(desk, pipeline(desk, fake))
    assert run.status == "succeeded", run.error
    looked = ToolCall.objects.get(run=run, qualified_name="orders.get_order_status")
    first, review = fake.requests[0]["body"], fake.requests[2]["body"]
    assert tool_names(first) == ["orders__get_order_status"]  # nothing was handed to the first task
    prompt = review["messages"][1]["content"]
    assert "## Output of the task 'triage'" in prompt
    assert "Status: done: it was delivered\nRefundable.\n" in prompt
    assert EVIDENCE_LINE.findall(prompt) == [str(looked.id)]
    assert f"{len(looked.result['text']):,} characters" in prompt
    sent = json.dumps(review)
    assert looked.result["text"] not in sent and json.dumps(looked.result["text"])[1:-1] not in sent
    assert "<<<TOOL OUTPUT from" not in sent and "orders__get_order_status" not in sent  # no transcript, no result
    assert "STATUS:" not in prompt  # the status lines became the conclusion's status
    assert tool_names(review) == ["run__get_result"]  # it may read the evidence in full
    assert run.state["conclusions"]["triage"] == {
        "status": "done", "reason": "it was delivered",
        "evidence": [{"id": str(looked.id), "tool": "orders.get_order_status", "chars": len(looked.result["text"])}]}


def test_a_later_agent_reads_an_earlier_result_in_full_with_run_get_result(desk):
    with FakeLLM("openai") as fake:
        fake.replies = [LOOK, TRIAGED, (200, fetch_listed), REVIEWED]
        run = start(desk, pipeline(desk, fake))
    assert run.status == "succeeded", run.error
    looked = ToolCall.objects.get(run=run, qualified_name="orders.get_order_status")
    read = ToolCall.objects.get(run=run, qualified_name="run.get_result")
    assert read.state == "succeeded" and read.rule == "run_result" and read.dispatched_at is None  # sent nowhere
    assert read.result["of_call"] == str(looked.id) and read.result["text"] == looked.result["text"]
    answer = fake.requests[3]["body"]["messages"][-1]
    assert answer["role"] == "tool" and looked.result["text"] in answer["content"]
    # the review's own conclusion lists the call it read, not the read
    assert run.state["conclusions"]["review"]["evidence"] == run.state["conclusions"]["triage"]["evidence"]
    assert run.tool_calls == 2


def test_run_get_result_reads_this_runs_calls_only(desk):
    with FakeLLM("openai") as fake:
        fake.replies = [LOOK, TRIAGED, REVIEWED]
        crew = pipeline(desk, fake)
        earlier = start(desk, crew)
        theirs = ToolCall.objects.get(run=earlier, qualified_name="orders.get_order_status")
        fake.replies = [(200, {"tool_call": ("orders__get_order_status", {"order_id": "A-1003"})}), TRIAGED,
                        (200, {"tool_call": ("run__get_result", {"call_id": str(theirs.id)})}),
                        (200, {"tool_call": ("run__get_result", {"call_id": "not an id"})}), REVIEWED]
        run = start(desk, crew, {"order_id": "A-1003", "amount_cents": 1})
    assert run.status == "succeeded", run.error
    reads = ToolCall.objects.filter(run=run, qualified_name="run.get_result")
    assert [(r.state, r.result) for r in reads] == [("failed", None), ("failed", None)]
    assert "of this run" in reads[0].error
    sent = json.dumps([r["body"] for r in fake.requests[5:]])
    assert theirs.result["text"] not in sent and json.dumps(theirs.result["text"])[1:-1] not in sent


def test_an_agent_handed_no_evidence_is_not_offered_run_get_result_and_cannot_call_it(desk):
    with FakeLLM("openai") as fake:
        fake.replies = [LOOK, TRIAGED, (200, {"tool_call": ("run__get_result", {"call_id": "x"})}), REVIEWED]
        run = start(desk, pipeline(desk, fake, context=()))  # review is handed nothing
    assert run.status == "succeeded", run.error
    assert tool_names(fake.requests[2]["body"]) == []
    read = ToolCall.objects.get(run=run, qualified_name="run.get_result")
    assert read.state == "denied" and read.result is None  # the policy point: a tool it was never granted


def test_no_server_may_take_the_name_of_the_runs_own_tools(desk):
    with pytest.raises(ValidationFailed) as refused:
        registry_services.create_server(actor=desk.actor, name="run", transport="stdio", trust_tier="internal",
                                        command="true", sync=False)
    assert "kept for Airlock's own tools" in refused.value.errors["name"]
