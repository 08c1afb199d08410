"""A tool's result is stored once: the ledger row keeps it, and the conversation's answer to the model names the
row instead of a second copy (apps/runs/messages.py). Whoever reads the conversation (a resumed worker's store,
the replay, the JSON export) gets the answer exactly as the model was sent it."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ToolReturnPart

from apps.audit.redaction import redact
from apps.runs import services, worker
from apps.runs.history import run_trace
from apps.runs.messages import GONE, LEDGER_TEXT_MIN, dump_messages, load_messages, turn_messages
from apps.runs.models import RunMessage, RunStep, ToolCall
from apps.runs.store.run_store import RunStore

pytestmark = pytest.mark.django_db

LIST = {"tool": "orders.list_orders", "args": {}}
LOOK_UP = {"tool": "orders.get_order_status", "args": {"order_id": "A-1001"}}


def listing_run(desk):
    lister = desk.agent("Lister", [{"call": [LIST, LOOK_UP]}, {"say": "Listed.\nSTATUS: done\nREASON: ok"}],
                        [{"tool": "orders.list_orders", "policy": "auto"},
                         {"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Listing", [("list", lister, "List the orders.", [])], inputs=[])
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs={},
                                                     enqueue=False).id)
    assert run.status == "succeeded", run.error
    turn = RunStep.objects.get(run=run, kind="agent")
    listed = ToolCall.objects.get(run=run, qualified_name="orders.list_orders")
    return turn, listed.result["text"]


def contents(payloads) -> list[str]:
    """The text of every part of stored or exported messages (JSON)."""
    return [part["content"] for payload in payloads for part in payload["parts"]
            if isinstance(part.get("content"), str)]


def answers(messages) -> dict[str, str]:
    return {part.tool_name: part.content for message in messages for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)}


def test_a_long_result_is_stored_once_and_every_reader_gets_the_answer_whole(desk):
    turn, text = listing_run(desk)
    assert len(text) >= LEDGER_TEXT_MIN

    stored = contents(RunMessage.objects.filter(turn=turn).values_list("payload", flat=True))
    assert len(stored) >= 4 and not any(text in content for content in stored)  # not a second copy

    history = load_messages(turn_messages(turn))
    sent = answers(history)
    assert text in sent["orders.list_orders"] and sent["orders.list_orders"].startswith("<<<")
    assert "A-1001" in sent["orders.get_order_status"]  # a short result stays in place

    resumed = RunStore(turn.run_id, "")  # a worker taking the run up: the turn and its conversation in one read
    assert resumed.messages(resumed.turn(str(turn.id))) == history
    assert RunStore(turn.run_id, "").messages(turn) == history
    assert dump_messages(history) == turn_messages(turn)

    exported = {step["id"]: step["messages"] for step in run_trace(turn.run)["steps"]}[str(turn.id)]
    assert exported == redact(turn_messages(turn))  # the export masks secrets, as every trace
    assert any(text in content for content in contents(exported))


def test_an_appended_step_leaves_the_stored_answers_as_they_were(desk):
    turn, text = listing_run(desk)
    before = list(RunMessage.objects.filter(turn=turn).order_by("seq").values_list("id", "payload"))
    store = RunStore(turn.run_id, "")
    history = store.messages(store.turn(str(turn.id)))
    store.save_messages(turn, [*history, *history[-1:]])  # grows by one: no earlier row is rewritten
    after = list(RunMessage.objects.filter(turn=turn).order_by("seq").values_list("id", "payload"))
    assert after[:len(before)] == before and len(after) == len(before) + 1
    assert text in answers(RunStore(turn.run_id, "").messages(turn))["orders.list_orders"]


def test_an_answer_whose_result_is_no_longer_kept_says_so(desk):
    """Retention empties the ledger's results and removes the conversations together; an answer that still named
    an emptied row would say the result is gone, never show a wrong one."""
    turn, text = listing_run(desk)
    ToolCall.objects.filter(run=turn.run, qualified_name="orders.list_orders").update(result=None)
    sent = answers(load_messages(turn_messages(turn)))
    assert GONE in sent["orders.list_orders"] and text not in sent["orders.list_orders"]


def test_a_fork_keeps_its_parent_s_answers_whole(desk):
    """A fork starts from its parent's conversation: those answers name the parent's ledger rows, which retention
    may empty while the fork is kept, so the fork stores them whole."""
    from apps.runs import replay

    refund = {"tool": "orders.refund_order", "args": {"order_id": "A-1001", "amount_cents": 700,
                                                      "request_id": "refund-A-1001"}}
    clerk = desk.agent("Clerk", [{"call": [LIST]}, {"call": [refund]}, {"say": "Done.\nSTATUS: done\nREASON: ok"}],
                       [{"tool": "orders.list_orders", "policy": "auto"},
                        {"tool": "orders.refund_order", "policy": "auto"}])
    crew = desk.sequential("Clerking", [("refund", clerk, "Refund the order.", [])], inputs=[])
    parent = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs={},
                                                        enqueue=False).id)
    assert parent.status == "succeeded", parent.error
    text = ToolCall.objects.get(run=parent, qualified_name="orders.list_orders").result["text"]
    call = ToolCall.objects.get(run=parent, qualified_name="orders.refund_order")

    fork = replay.fork_call(actor=desk.actor, run_id=parent.id, tool_call_id=call.id,
                            arguments={**call.arguments, "amount_cents": 500, "request_id": "refund-again"})
    fork = worker.drive_run(run_id=fork.id)
    assert fork.status == "succeeded", fork.error
    turn = RunStep.objects.get(run=fork, kind="agent")
    assert any(text in content for content in contents(RunMessage.objects.filter(turn=turn)
                                                       .values_list("payload", flat=True)))

    ToolCall.objects.filter(run=parent).update(result=None)  # retention empties the parent's rows
    assert text in answers(load_messages(turn_messages(turn)))["orders.list_orders"]
