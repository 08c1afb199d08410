"""A fork from a model call (`apps.runs.replay.fork_call`): the fork's turn plays the parent's history up to that
call, with the edited arguments, instead of asking the model; its tool calls are then proposed as new ledger rows
and go through policy like any (a held write is held again). The replayed call costs nothing: no tokens."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ToolCallPart

from apps.runs.engine.model import offered_tools, proposed_call
from apps.runs.engine.seam import Store
from apps.runs.messages import load_messages
from apps.runs.models import RunStep


def due(run_state: dict[str, Any], turn: RunStep, messages: list[Any]) -> dict[str, Any] | None:
    """The replay this fresh turn plays, if any (only its first step, only the fork's chosen task)."""
    replay = run_state.get("replay")
    if not replay or replay.get("task") != turn.task:
        return None
    return replay if not any(getattr(m, "kind", "") == "response" for m in messages) else None


def play(store: Store, *, turn: RunStep, agent: dict[str, Any], replay: dict[str, Any]) -> None:
    """Sets the turn's history to the parent's and records the replayed model call with its proposed calls."""
    run = store.run
    tools = run.snapshot.get("tools", {})
    history = load_messages(replay["messages"])
    response = history[-1]
    offered = offered_tools(agent, tools, tainted=run.tainted)
    calls = [proposed_call(part, offered=offered, tools=tools)
             for part in response.parts if isinstance(part, ToolCallPart)]
    store.record_model_call(turn=turn, messages=history, response=response, provider=replay.get("provider", ""),
                            model=replay.get("model", ""), latency_ms=0, calls=calls)
    store.save_state(state={k: v for k, v in store.run.state.items() if k != "replay"})
    store.event("model.replayed", step_id=str(turn.id), agent=agent["name"], task=turn.task,
                edited_tool_call=replay.get("tool_call_id"), calls=len(calls))
