"""Crew templates: starting points that prefill the crew editor (nothing is saved until Create).
Each task names words to look for in an agent's name or role, so the editor can suggest an
agent the organisation already has; the person confirms or picks another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CrewStarter:
    key: str
    title: str
    summary: str
    values: dict[str, Any]  # the crew editor's fields, tasks without agents
    agent_hints: dict[str, tuple[str, ...]]  # task name (or "supervisor") -> words to match


REQUEST = [{"name": "request", "type": "string", "required": True}]
LIMITS = {"max_hops": 6, "max_tool_calls": 20, "timeout_s": 900}

STARTERS: tuple[CrewStarter, ...] = (
    CrewStarter(
        key="triage-action", title="Sequential triage → action",
        summary="One agent reads the request and the records it mentions; a second acts on what it found.",
        values={"name": "Triage and action", "process": "sequential", "inputs": REQUEST, **LIMITS,
                "description": "Triage a request, then act on it.",
                "tasks": [
                    {"name": "triage", "description": "Read this request and look up what it mentions: {request}. "
                                                      "Say what should be done, and why.", "context": ""},
                    {"name": "act", "description": "Do what the triage found for this request, within your scope: "
                                                   "{request}", "context": "triage"},
                ]},
        agent_hints={"triage": ("triage", "research"), "act": ("refund", "clerk", "action")},
    ),
    CrewStarter(
        key="supervised", title="Supervised desk",
        summary="A supervisor agent sends the request to whichever member fits, until it is done.",
        values={"name": "Supervised desk", "process": "supervisor", "inputs": REQUEST, **LIMITS,
                "description": "A supervisor routes each request to the member that handles it.", "tasks": []},
        agent_hints={"supervisor": ("supervisor",)},
    ),
    CrewStarter(
        key="single", title="One agent, one task",
        summary="The smallest crew: one agent handles the request. A good first run.",
        values={"name": "Single task", "process": "sequential", "inputs": REQUEST, **LIMITS,
                "description": "One agent handles the request.",
                "tasks": [{"name": "handle", "description": "Handle this request: {request}", "context": ""}]},
        agent_hints={"handle": ()},
    ),
)


def crew_starter(key: str) -> CrewStarter | None:
    return next((s for s in STARTERS if s.key == key), None)


def _suggest(agents: list[Any], hints: tuple[str, ...]) -> str:
    for agent in agents:
        text = f"{agent.name} {agent.role}".lower()
        if any(word in text for word in hints):
            return str(agent.id)
    return ""


def starter_values(starter: CrewStarter, agents: list[Any]) -> dict[str, Any]:
    """The editor's values for this starter, with an agent suggested for each task where one fits."""
    values = {**starter.values, "members": [], "routing_rules": []}
    values["tasks"] = [{**task, "agent_id": _suggest(agents, starter.agent_hints.get(task["name"], ()))}
                       for task in starter.values["tasks"]]
    values["supervisor_agent_id"] = _suggest(agents, starter.agent_hints.get("supervisor", ()))
    if starter.values["process"] == "supervisor":
        values["members"] = [str(a.id) for a in agents if str(a.id) != values["supervisor_agent_id"]]
    values["inputs"] = [dict(row) for row in starter.values["inputs"]]
    return values
