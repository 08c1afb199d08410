"""A turn's conversation is stored append-only: a step adds rows for its new messages and leaves the earlier
ones as they were; the whole conversation reads back the same everywhere (the store, the export, a new store)."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, UserPromptPart

from apps.audit.redaction import redact
from apps.runs import services, worker
from apps.runs.history import run_trace
from apps.runs.messages import compacted, dump_messages, load_messages, turn_messages
from apps.runs.models import RunMessage, RunStep
from apps.runs.store.run_store import RunStore

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}


def stored(turn: RunStep) -> list[tuple]:
    return list(RunMessage.objects.filter(turn=turn).order_by("seq").values_list("id", "seq", "payload",
                                                                                   "created_at"))


def finished_turn(desk) -> RunStep:
    crew = desk.refund_desk(refund_policy="auto")
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                     enqueue=False).id)
    assert run.status == "succeeded", run.error
    return RunStep.objects.filter(run=run, kind="agent").order_by("position").last()  # the refunds agent


def test_a_finished_run_s_conversation_reads_back_whole_in_order_and_in_its_export(desk):
    turn = finished_turn(desk)
    rows = stored(turn)
    assert [seq for _, seq, _, _ in rows] == list(range(len(rows))) and len(rows) >= 4  # prompt, call, result, answer
    history = load_messages(turn_messages(turn))
    assert [compacted(payload) for payload in dump_messages(history)] == [payload for _, _, payload, _ in rows]
    assert isinstance(history[0], ModelRequest) and isinstance(history[-1], ModelResponse)
    exported = {s["id"]: s["messages"] for s in run_trace(turn.run)["steps"]}
    assert exported[str(turn.id)] == redact(turn_messages(turn))  # the export masks secrets, as every trace
    calls = RunStep.objects.filter(run=turn.run, kind="llm")
    assert all(exported[str(step.id)] is None for step in calls)  # a model call's step has no conversation


def test_a_step_appends_its_messages_and_leaves_the_earlier_rows_untouched(desk):
    turn = finished_turn(desk)
    before = stored(turn)
    store = RunStore(turn.run_id, "")
    note = ModelRequest(parts=[UserPromptPart("One more thing.")])
    store.save_messages(turn, [*store.messages(turn), note])

    after = stored(turn)
    assert after[:len(before)] == before  # same rows: ids, payloads, times
    assert len(after) == len(before) + 1 and after[-1][2] == compacted(dump_messages([note])[0])
    assert load_messages(turn_messages(turn))[-1] == note
    assert RunStore(turn.run_id, "").messages(turn) == store.messages(turn)  # a new store reads the same


def test_a_rewritten_history_is_replaced_from_its_first_change_only(desk):
    turn = finished_turn(desk)
    before = stored(turn)
    store = RunStore(turn.run_id, "")
    history = store.messages(turn)
    at = len(history) - 2
    edited = [*history[:at], ModelRequest(parts=[UserPromptPart("Instead, this.")])]  # shorter, and changed at `at`
    store.save_messages(turn, edited)

    after = stored(turn)
    assert after[:at] == before[:at]
    assert [seq for _, seq, _, _ in after] == list(range(len(edited)))
    assert load_messages(turn_messages(turn)) == edited == RunStore(turn.run_id, "").messages(turn)
