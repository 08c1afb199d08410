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


# Where the handed-on output starts in a task's prompt: Airlock's section, CrewAI's `task_with_context` slice.
CONTEXT_MARKS = ("\n\n## Output of the task ", "\n\nThis is the context you're working with:\n")
PARTS = ("system", "task", "context", "tool_results", "assistant", "tool_definitions")


def input_tokens(body: dict, encode: Callable[[str], list[int]]) -> dict[str, int]:
    """The input tokens of one chat-completion request, in all (`total`) and by part (PARTS): every message's
    role and text, tool calls and tool-call id, and the tool definitions offered as compact JSON. How a provider
    bills them varies by a few tokens per message and per tool; the same rule counts both sides."""
    parts = dict.fromkeys(PARTS, 0)
    for message in body.get("messages") or []:
        role, text = message.get("role"), _message_text(message)
        if role == "user":
            cut = min((i for i in (text.find(mark) for mark in CONTEXT_MARKS) if i >= 0), default=len(text))
            parts["task"] += len(encode(text[:cut]))
            parts["context"] += len(encode(text[cut:])) if cut < len(text) else 0
        else:
            parts[{"system": "system", "tool": "tool_results"}.get(role, "assistant")] += len(encode(text))
    if body.get("tools"):
        parts["tool_definitions"] = len(encode(json.dumps(body["tools"], separators=(",", ":"))))
    return {"total": sum(parts.values()), **parts}
