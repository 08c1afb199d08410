"""The scripted model (provider `scripted`, API.md): deterministic, no network.

An agent's `script` is a list of turns and each model call consumes the next one:
`{"call": [{"tool": ..., "args": {...}}]}`, `{"say": "text"}` (`{{result}}` in it: the last tool results'
text), `{"route": "<member>"|"FINISH"}`
or `{"obey": true}` (emit every `CALL <tool> <json args>` line of the last tool results, like
a fully injectable model). When the script runs out the model says `done`.

The turn to play is derived from the message history alone (plus a caller-given offset for
turns consumed in earlier conversations), so a run resumed after a crash replays identically.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel, _estimate_usage
from pydantic_ai.usage import RequestUsage

from apps.agents.prompts import TOOL_OUTPUT_CLOSE, TOOL_OUTPUT_OPEN
from apps.core.errors import ValidationFailed

TURN_KINDS = ("call", "say", "route", "obey")
MAX_TURNS = 200
_PLACEHOLDER = re.compile(r"\{\{\s*input\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_RESULT = re.compile(r"\{\{\s*result\s*\}\}")
_CALL_LINE = re.compile(r"^\s*CALL\s+([A-Za-z0-9_.\-]+)\s+(\{.*\})\s*$", re.MULTILINE)


class ScriptError(ValueError):
    def __init__(self, message: str, *, turn: int | None = None) -> None:
        super().__init__(message)
        self.turn = turn


def validate_script(value: Any) -> list[dict[str, Any]]:
    """Checks a script (a list, or JSON text of one) and returns it as a list.

    Raises ValidationFailed with a `script` error that names the bad turn (1-based).
    """
    try:
        return _validated(value)
    except ScriptError as exc:
        where = f"Turn {exc.turn}: " if exc.turn is not None else ""
        raise ValidationFailed(f"The script is not valid. {where}{exc}", {"script": f"{where}{exc}"}) from None


def _validated(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).") from None
    if value is None:
        return []
    if not isinstance(value, list):
        raise ScriptError("a script is a JSON list of turns, e.g. [{\"say\": \"hello\"}].")
    if len(value) > MAX_TURNS:
        raise ScriptError(f"keep scripts under {MAX_TURNS} turns.")
    for number, turn in enumerate(value, start=1):
        _check_turn(turn, number)
    return value


def _check_turn(turn: Any, number: int) -> None:
    if not isinstance(turn, dict):
        raise ScriptError("each turn is an object such as {\"say\": \"...\"}.", turn=number)
    kinds = [k for k in turn if k in TURN_KINDS]
    unknown = sorted(set(turn) - set(TURN_KINDS))
    if unknown:
        raise ScriptError(f"unknown key {unknown[0]!r}; a turn has one of {', '.join(TURN_KINDS)}.", turn=number)
    if len(kinds) != 1:
        raise ScriptError(f"a turn has exactly one of {', '.join(TURN_KINDS)}.", turn=number)
    kind = kinds[0]
    body = turn[kind]
    if kind == "say" and not isinstance(body, str):
        raise ScriptError("`say` takes text.", turn=number)
    if kind == "route" and not (isinstance(body, str) and body.strip()):
        raise ScriptError("`route` takes a member agent's name or \"FINISH\".", turn=number)
    if kind == "obey" and body is not True:
        raise ScriptError("`obey` must be true.", turn=number)
    if kind == "call":
        _check_calls(body, number)


def _check_calls(calls: Any, number: int) -> None:
    if not isinstance(calls, list) or not calls:
        raise ScriptError("`call` takes a non-empty list of {\"tool\": ..., \"args\": {...}}.", turn=number)
    for index, call in enumerate(calls, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str) or not call["tool"].strip():
            raise ScriptError(f"call {index} needs a \"tool\" (its qualified name, e.g. orders.list_orders).",
                              turn=number)
        extra = sorted(set(call) - {"tool", "args"})
        if extra:
            raise ScriptError(f"call {index} has an unknown key {extra[0]!r} (use tool and args).", turn=number)
        if not isinstance(call.get("args", {}), dict):
            raise ScriptError(f"call {index}: \"args\" must be an object.", turn=number)


def fill_inputs(value: Any, inputs: Mapping[str, Any]) -> Any:
    """Replaces `{{input.X}}` with run inputs; a string that is only a placeholder takes the input's own type."""
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value.strip())
        if whole:
            return inputs.get(whole.group(1))
        return _PLACEHOLDER.sub(lambda m: "" if inputs.get(m.group(1)) is None else str(inputs[m.group(1)]), value)
    if isinstance(value, list):
        return [fill_inputs(v, inputs) for v in value]
    if isinstance(value, dict):
        return {k: fill_inputs(v, inputs) for k, v in value.items()}
    return value


def last_result(messages: list[ModelMessage]) -> str:
    """The text of the most recent tool results as the tool gave it (without the data markers around it;
    a tool's error keeps its `ERROR` line), what a `say` turn's `{{result}}` quotes: an answer that reports
    what the tool did, not what the script expected. "" before any tool call."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        returns = [p for p in message.parts if isinstance(p, ToolReturnPart)]
        if returns:
            texts = [p.content if isinstance(p.content, str) else json.dumps(p.content, default=str) for p in returns]
            return "\n".join(line for text in texts for line in text.splitlines()
                             if not line.startswith(TOOL_OUTPUT_OPEN) and line != TOOL_OUTPUT_CLOSE)
    return ""


def injected_calls(messages: list[ModelMessage]) -> list[tuple[str, dict[str, Any]]]:
    """Every `CALL <tool> <json args>` line in the most recent tool results (what `obey` follows)."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        returns = [p for p in message.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            continue
        calls = []
        for part in returns:
            text = part.content if isinstance(part.content, str) else json.dumps(part.content, default=str)
            for tool, raw_args in _CALL_LINE.findall(text):
                try:
                    args = json.loads(raw_args)
                except json.JSONDecodeError:
                    continue
                if isinstance(args, dict):
                    calls.append((tool, args))
        return calls
    return []


def play_turn(turn: Mapping[str, Any] | None, *, index: int, messages: list[ModelMessage],
              inputs: Mapping[str, Any]) -> ModelResponse:
    """The model response for one script turn (None: the script ran out)."""
    if turn is None:
        return ModelResponse(parts=[TextPart("done")])
    if "say" in turn:
        text = _RESULT.sub(lambda _: last_result(messages), fill_inputs(turn["say"], inputs))
        return ModelResponse(parts=[TextPart(text)])
    if "route" in turn:
        return ModelResponse(parts=[TextPart(json.dumps({"route": turn["route"]}))])
    if "call" in turn:
        calls = [(c["tool"], fill_inputs(c.get("args", {}), inputs)) for c in turn["call"]]
    else:
        calls = injected_calls(messages)
        if not calls:
            return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart(tool_name=tool, args=args, tool_call_id=f"script-{index}-{n}")
                                for n, (tool, args) in enumerate(calls, start=1)])


# The tokens the scripted model reports: pydantic-ai's estimate for its test models (FunctionModel makes it
# when a response carries no usage), summed message by message and kept per message object. The engine keeps
# a turn's parsed history between steps, so a call counts only its new messages; FunctionModel's own
# estimate went through the whole history on every call (a cost that grew with every step: bench/run.py).
TOKENS_KEPT = 4096
REQUEST_OVERHEAD = 50  # what _estimate_usage adds once per call
_counted: dict[int, tuple[weakref.ref, int, int]] = {}  # id(message) -> (the message, input, output tokens)


def _message_tokens(message: ModelMessage) -> tuple[int, int]:
    kept = _counted.get(id(message))
    if kept is not None and kept[0]() is message:
        return kept[1], kept[2]
    usage = _estimate_usage([message])
    tokens = (usage.input_tokens - REQUEST_OVERHEAD, usage.output_tokens)
    if len(_counted) >= TOKENS_KEPT:
        for key in list(_counted)[:TOKENS_KEPT // 4]:  # the oldest quarter
            del _counted[key]
    _counted[id(message)] = (weakref.ref(message), *tokens)
    return tokens


def estimated_usage(messages: list[ModelMessage], response: ModelResponse) -> RequestUsage:
    """The same numbers as FunctionModel's estimate for `messages` and the new `response`."""
    tokens_in, tokens_out = REQUEST_OVERHEAD, _estimate_usage([response]).output_tokens
    for message in messages:
        more_in, more_out = _message_tokens(message)
        tokens_in, tokens_out = tokens_in + more_in, tokens_out + more_out
    return RequestUsage(input_tokens=tokens_in, output_tokens=tokens_out)


def scripted_model(script: list[dict[str, Any]], *, inputs: Mapping[str, Any] | None = None,
                   turn_offset: int = 0, name: str = "scripted") -> FunctionModel:
    """A pydantic-ai model that plays `script`. Turn = `turn_offset` + model responses already in the history."""
    turns = list(script or [])
    run_inputs = dict(inputs or {})

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # async although it never awaits: pydantic-ai runs a plain function on a worker thread, a hop per call
        index = turn_offset + sum(1 for m in messages if isinstance(m, ModelResponse))
        turn = turns[index] if index < len(turns) else None
        response = play_turn(turn, index=index, messages=messages, inputs=run_inputs)
        response.usage = estimated_usage(messages, response)
        return response

    return FunctionModel(respond, model_name=name)
