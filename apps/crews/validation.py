"""Checks a crew definition as a whole and reports every problem against the field it belongs to.

Plain data in (dicts of names, agents already resolved by the service), field errors out:
`tasks.2.context`, `members`, `supervisor_agent_id`, `inputs.0.name` ...
"""

from __future__ import annotations

import re
from typing import Any

INPUT_TYPES = ("string", "integer", "number", "boolean")
_PLACEHOLDER = re.compile(r"\{([^{}\s]*)\}")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def check_inputs(inputs: list[Any], errors: dict[str, str]) -> list[dict[str, Any]]:
    out, seen = [], set()
    for index, raw in enumerate(inputs or []):
        key = f"inputs.{index}"
        raw = raw if isinstance(raw, dict) else {}
        name = str(raw.get("name") or "").strip()
        kind = str(raw.get("type") or "string")
        if not _IDENTIFIER.match(name):
            errors[key] = "Input names are letters, digits and underscores, e.g. order_id."
        elif name in seen:
            errors[key] = f"The input {name!r} is declared twice."
        elif kind not in INPUT_TYPES:
            errors[key] = f"Input type must be one of: {', '.join(INPUT_TYPES)}."
        seen.add(name)
        out.append({"name": name, "type": kind, "required": bool(raw.get("required", True)),
                    "description": str(raw.get("description") or "").strip()[:300]})
    return out


def placeholders(text: str) -> list[str]:
    return _PLACEHOLDER.findall(text or "")


def check_tasks(tasks: list[dict[str, Any]], *, input_names: set[str], errors: dict[str, str]) -> None:
    """Names unique, descriptions use only declared inputs, context names earlier tasks, no cycles."""
    positions: dict[str, int] = {}
    for index, task in enumerate(tasks):
        name = task["name"]
        if not name:
            errors[f"tasks.{index}.name"] = "Give the task a name."
        elif name in positions:
            errors[f"tasks.{index}.name"] = f"Two tasks are named {name!r}."
        else:
            positions[name] = index
        if not task["description"]:
            errors[f"tasks.{index}.description"] = "Say what this task should do."
        unknown = [p for p in placeholders(task["description"]) if p not in input_names]
        if unknown:
            declared = ", ".join(sorted(input_names)) or "none declared yet"
            errors[f"tasks.{index}.description"] = (f"{{{unknown[0]}}} is not a declared input (inputs: {declared}). "
                                                    "Declare it under Inputs or fix the name.")
    for index, task in enumerate(tasks):
        problem = _context_problem(task, index, positions, tasks)
        if problem:
            errors[f"tasks.{index}.context"] = problem


def _context_problem(task: dict[str, Any], index: int, positions: dict[str, int],
                     tasks: list[dict[str, Any]]) -> str | None:
    for name in task["context"]:
        if name == task["name"]:
            return "A task cannot receive its own output."
        if name not in positions:
            return f"There is no task named {name!r}."
    cycle = _cycle_from(task["name"], {t["name"]: t["context"] for t in tasks})
    if cycle:
        return "These tasks wait for each other in a cycle: " + " → ".join(cycle) + "."
    later = [n for n in task["context"] if positions[n] > index]
    if later:
        return f"{later[0]!r} runs after this task; move it earlier or receive a task that runs before."
    return None


def _cycle_from(start: str, graph: dict[str, list[str]]) -> list[str] | None:
    """A path start → ... → start through `context` edges, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    visited: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, []):
            if nxt == start:
                return [*path, start]
            if nxt not in visited and nxt in graph:
                visited.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def check_routing_rules(rules: list[Any], *, member_names: set[str], errors: dict[str, str]) -> list[dict[str, str]]:
    out = []
    for index, raw in enumerate(rules or []):
        raw = raw if isinstance(raw, dict) else {}
        contains, route = str(raw.get("contains") or "").strip(), str(raw.get("route") or "").strip()
        members = ", ".join(sorted(member_names)) or "none picked yet"
        if not contains:
            errors[f"routing_rules.{index}"] = "Start the rule with the text it looks for, then => and where it goes."
        elif not route:
            errors[f"routing_rules.{index}"] = (f"Say where “{contains}” goes: write => and a member's name "
                                                f"({members}) or FINISH.")
        elif route != "FINISH" and route not in member_names:
            errors[f"routing_rules.{index}"] = (f"“{route}” is not a member of this crew. Members: {members}; "
                                                "or FINISH to end the run.")
        out.append({"contains": contains, "route": route})
    return out
