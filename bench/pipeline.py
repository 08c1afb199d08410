"""The pipeline of the token benchmark (bench/tokens.py), the same words on both sides, and how a request's
input tokens are counted. Standard library only: bench/crewai_side.py imports it from CrewAI's venv, and
bench/tokens.py from the project's.

Agent K looks up record #K with a tool that returns 2 KB (bench/payload.py) and builds on what agent K-1
concluded: the task's description says so, and the framework hands it the earlier task's output.
"""

from __future__ import annotations

import json
from collections.abc import Callable

EXPECTED = "A short report on the record, building on the previous step's result."


def agent(k: int) -> dict[str, str]:
    """An agent's words: CrewAI's role, goal and backstory; Airlock's name, role and instructions."""
    return {"name": f"Record analyst {k}", "role": f"Record analyst {k}",
            "goal": f"Report what record {k} says and whether it agrees with the previous step's result.",
            "backstory": "You check records for the team, one record at a time, and report plainly."}


def task(k: int) -> str:
    previous = f" Build on the result of step {k - 1}." if k > 1 else ""
    return f"Step {k}: Look up record #{k} with the lookup tool and report what it says.{previous}"


def _message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        content = "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    parts = [message.get("role") or "", content or ""]
    if message.get("tool_calls"):
        parts.append(json.dumps(message["tool_calls"], separators=(",", ":")))
    if message.get("tool_call_id"):
        parts.append(message["tool_call_id"])
    return "\n".join(parts)


def input_tokens(body: dict, encode: Callable[[str], list[int]]) -> int:
    """The input tokens of one chat-completion request: every message's role, text, tool calls and tool-call
    id, and the tool definitions offered, as compact JSON (how a provider bills them varies by a few tokens
    per message and per tool; the same rule counts both sides)."""
    total = sum(len(encode(_message_text(m))) for m in body.get("messages") or [])
    if body.get("tools"):
        total += len(encode(json.dumps(body["tools"], separators=(",", ":"))))
    return total
