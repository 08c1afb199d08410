"""The engine's loop: plain Python over a `Store` (engine/seam.py), no request, no ORM of its own.

`advance(store)` does a bounded number of steps of one claimed run and says what happened:
"continue" (more to do: the caller re-enqueues), "waiting" (parked for people) or "finished".
A step is one of: start the next agent turn, call the model, move the ledger rows of the last
model response forward (policy, holds, dispatch), or end a turn. Each step commits before the
next, so a run can stop after any of them and pick up from the database.
"""

from __future__ import annotations

import time
from typing import Any

from django.utils import timezone
from pydantic_ai.messages import ModelResponse, ToolCallPart

from apps.core import tracing
from apps.core.metrics import STEP_SECONDS
from apps.runs.engine import handoff, replaying, second_opinion
from apps.runs.engine.errors import StopRun
from apps.runs.engine.model import call_model, offered_tools
from apps.runs.engine.process import ROUTING, end_turn, start_next
from apps.runs.engine.seam import Store
from apps.runs.engine.tools import answers, made_writes, resolve_calls
from apps.runs.models import Run, RunStep

STEPS_PER_TASK = 25  # then the task re-enqueues itself: no task comes near the broker's visibility timeout
TASK_SECONDS = 30.0


def advance(store: Store, *, max_steps: int = STEPS_PER_TASK, max_seconds: float = TASK_SECONDS) -> str:
    """`max_steps` steps of the claimed run at most; what happened. Nothing the store deferred stays behind when the
    task ends: it is written here, or, when the run goes on ("continue"), by the caller's `store.release()`, with the
    hand-back in the same round trip (a resume's task ended with two commits, one after the other, for those)."""
    outcome = _advance(store, started=time.monotonic(), max_steps=max_steps, max_seconds=max_seconds)
    second_opinion.settle(store)  # no verdict is left pending in this process when the task ends
    if outcome != "continue":
        store.flush()
    return outcome


def _advance(store: Store, *, started: float, max_steps: int, max_seconds: float) -> str:
    for _ in range(max_steps):
        begun = time.perf_counter()
        try:
            with tracing.span("run.step"):
                outcome = step(store)
        except StopRun as stop:
            STEP_SECONDS.labels(outcome="stopped").observe(time.perf_counter() - begun)
            store.finish(stop.status, output=store.run.state.get("last_output", ""), error=stop.message,
                         error_class=stop.error_class)
            return "finished"
        STEP_SECONDS.labels(outcome=outcome).observe(time.perf_counter() - begun)
        if outcome != "continue":
            return outcome
        if time.monotonic() - started > max_seconds:
            break
    return "continue"


def step(store: Store) -> str:
    run = store.refresh()
    if run.is_finished:
        return "finished"
    if run.cancel_requested:
        raise StopRun("cancelled", "Cancelled by a person.")
    _check_clock(run)
    store.renew_lease()
    turn = store.turn(run.state.get("turn_id"))
    if turn is None:
        return start_next(store)
    agent = run.snapshot["agents"][str(turn.agent_id)]
    messages = store.messages(turn)
    last = messages[-1]
    if isinstance(last, ModelResponse):
        if any(isinstance(p, ToolCallPart) for p in last.parts):
            return _answer_tool_calls(store, turn, agent, messages)
        return end_turn(store, turn, last.text or "")
    if (replay := replaying.due(run.state, turn, messages)) is not None:  # a fork from a model call
        replaying.play(store, turn=turn, agent=agent, replay=replay)
        return _answer_tool_calls(store, turn, agent, store.messages(turn))
    if turn.task != ROUTING and store.model_calls(turn) >= agent.get("max_steps", 8):
        raise StopRun("limit_exceeded", f"Step limit: {agent['name']} used all {agent.get('max_steps')} model calls "
                                        "of its turn without finishing.", "limit")
    offered = {} if turn.task == ROUTING else offered_tools(agent, run.snapshot.get("tools", {}), tainted=run.tainted)
    if turn.task != ROUTING and handoff.offered(run):  # the task was handed evidence it may read in full
        offered[handoff.RESULT_TOOL_MODEL_NAME] = handoff.RESULT_TOOL
    turn_offset = 0 if turn.task == ROUTING else run.state.get("played", {}).get(str(turn.agent_id), 0)
    call_model(store, turn=turn, agent=agent, messages=messages, offered=offered, turn_offset=turn_offset)
    messages = store.messages(turn)
    if any(isinstance(p, ToolCallPart) for p in messages[-1].parts):  # answer them now: the response is stored
        return _answer_tool_calls(store, turn, agent, messages)
    return "continue"


def _answer_tool_calls(store: Store, turn: RunStep, agent: dict[str, Any], messages: list[Any]) -> str:
    rows = store.last_calls(turn)
    if resolve_calls(store, turn=turn, agent=agent, rows=rows) == "waiting":
        held = sum(1 for r in rows if r.state == "held")
        asked = sum(1 for r in rows if r.state == "held" and r.rule == "human_ask")
        reason = " ".join(part for part in (
            f"{held - asked} tool call(s) wait for a person's decision." if held - asked else "",
            f"{asked} question(s) wait for a person's answer." if asked else "") if part) if held else \
            "A tool call's outcome is unknown: a person must resolve it."
        return "waiting" if store.wait(reason) else "continue"
    # After a write, held: committed with the completions of the calls just made (their state, result and audit
    # row) by the store's next transaction or, at the latest, before the next model call starts (`commit_held`):
    # a worker that dies during that call leaves a write that happened as `succeeded`, not `dispatched` (which a
    # resume must make `unknown` for a person). When the task ends here (a resume's one step) they go out with
    # the run's hand-back, one commit instead of two. After reads only, written with the next model call's record
    # like the other deferred writes (one commit per step): a read has no effect a person must account for.
    wrote = made_writes(store.run.snapshot.get("tools", {}), rows)
    store.save_messages(turn, [*messages, answers(rows)], defer=not wrote, hold=wrote)
    return "continue"


def _check_clock(run: Run) -> None:
    """Wall-clock limit, not counting time spent waiting for people."""
    limit = run.snapshot["crew"].get("timeout_s") or 900
    if run.started_at is None:
        return
    waited = float(run.state.get("waited_s", 0))
    elapsed = (timezone.now() - run.started_at).total_seconds() - waited
    if elapsed > limit:
        raise StopRun("timed_out", f"Timeout: the run worked for more than {limit} s.", "limit")
