"""A conversation is stored without the fields its messages carry at their defaults, and every read gives it back
exactly as it was dumped (apps/runs/messages.py): what the model is sent on a resume, a replay or an export must
never differ from what it was sent before."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from apps.runs import services, worker
from apps.runs.messages import compacted, dump_messages, expanded, load_messages, turn_messages
from apps.runs.models import RunMessage, RunStep
from apps.runs.store.run_store import RunStore

AT = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)


def every_kind_of_message() -> list:
    """Parts of each kind, at their defaults and away from them (an error outcome, provider details, usage)."""
    return [
        ModelRequest(parts=[SystemPromptPart("Be brief.", timestamp=AT), UserPromptPart("Refund A-1", timestamp=AT),
                            UserPromptPart(["Look:", BinaryContent(b"\x89PNG", media_type="image/png")], timestamp=AT)],
                     instructions="Only refunds.", timestamp=AT),
        ModelResponse(parts=[ThinkingPart("hmm", signature="sig-1", provider_name="anthropic"),
                             TextPart("Looking it up."),
                             ToolCallPart("orders__get", {"order_id": "A-1"}, tool_call_id="c1"),
                             ToolCallPart("orders__list", '{"page": 0}', tool_call_id="c2", id="item-9")],
                      usage=RequestUsage(input_tokens=120, output_tokens=0, cache_read_tokens=7, details={"x": 1}),
                      model_name="gpt-4.1", timestamp=AT, provider_name="openai", provider_response_id="resp-1",
                      finish_reason="tool_call", provider_details={"finish_reason": "tool_calls"}),
        ModelRequest(parts=[ToolReturnPart("orders__get", {"status": "paid", "note": None}, tool_call_id="c1",
                                           timestamp=AT),
                            ToolReturnPart("orders__list", "denied by policy", tool_call_id="c2", timestamp=AT,
                                           outcome="denied", metadata={"reason": "never"}),
                            ToolReturnPart("orders__get", "bad args", tool_call_id="c3", timestamp=AT,
                                           outcome="retried"),
                            RetryFeedbackPart("answer in JSON", retry=RetryInfo(cause="no_output", attempt=1),
                                              timestamp=AT)]),
        ModelResponse(parts=[NativeToolCallPart("web_search", {"q": "airlock"}, tool_call_id="w1",
                                                provider_name="openai"),
                             NativeToolReturnPart("web_search", [{"url": "https://example.com"}], tool_call_id="w1",
                                                  timestamp=AT, provider_name="openai"),
                             FilePart(BinaryContent(b"GIF89a", media_type="image/gif")),
                             TextPart("")],
                      usage=RequestUsage(), timestamp=AT),
    ]


def test_every_kind_of_message_reads_back_exactly_as_dumped_and_smaller():
    messages = every_kind_of_message()
    dumped = dump_messages(messages)
    stored = [compacted(payload) for payload in dumped]

    assert [expanded(payload) for payload in stored] == dumped
    assert load_messages([expanded(payload) for payload in stored]) == load_messages(dumped)
    assert all(len(str(s)) < len(str(d)) for s, d in zip(stored, dumped, strict=True))
    # what is not at its default stays, and every part keeps what says which class it is
    assert stored[1]["usage"] == {"input_tokens": 120, "cache_read_tokens": 7, "details": {"x": 1}}
    assert stored[1]["provider_response_id"] == "resp-1" and "model_id" not in stored[1]
    assert stored[2]["parts"][1]["outcome"] == "denied" and "outcome" not in stored[2]["parts"][0]
    assert all("part_kind" in part for payload in stored for part in payload["parts"])
    assert all("kind" in payload for payload in stored)


def test_a_message_stored_whole_before_reads_back_unchanged():
    dumped = dump_messages(every_kind_of_message())

    assert [expanded(payload) for payload in dumped] == dumped


def test_a_value_equal_to_a_default_in_another_type_is_kept():
    """False is not 0 and "" is not null: only a value of the default's own JSON type is left out."""
    request = dump_messages([ModelRequest(parts=[UserPromptPart("hi", timestamp=AT)], timestamp=AT)])[0]
    odd = {**request, "instructions": "", "metadata": False}

    assert compacted(odd)["instructions"] == "" and compacted(odd)["metadata"] is False
    assert expanded(compacted(odd)) == odd


@pytest.mark.django_db
def test_a_run_stores_its_conversation_slim_and_a_resumed_worker_reads_it_whole(desk):
    lookup = {"tool": "orders.get_order_status", "args": {"order_id": "A-1001"}}
    agent = desk.agent("Looker", [{"call": [lookup]}, {"say": "Paid.\nSTATUS: done\nREASON: ok"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Look", [("look", agent, "Look A-1001 up.", [])], inputs=[])
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs={},
                                                     enqueue=False).id)
    assert run.status == "succeeded", run.error
    turn = RunStep.objects.get(run=run, kind="agent")

    rows = list(RunMessage.objects.filter(turn=turn).order_by("seq").values_list("payload", flat=True))
    responses = [row for row in rows if row["kind"] == "response"]
    assert responses and not any("provider_response_id" in row or "model_id" in row for row in responses)

    history = load_messages(turn_messages(turn))
    assert dump_messages(history) == turn_messages(turn)  # read back as dumped: a resume appends, never rewrites
    assert any(isinstance(part, ToolReturnPart) and "A-1001" in str(part.content)
               for message in history for part in message.parts)
    resumed = RunStore(turn.run_id, "")
    assert resumed.messages(resumed.turn(str(turn.id))) == history
