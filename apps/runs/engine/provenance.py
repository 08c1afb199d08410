"""The provenance facts of one proposed call (apps.registry.provenance): which destinations in its arguments the
run's request never mentions, and which arguments carry text copied from a tool result.

Airlock-controlled data is the request (the run's inputs, the crew's tasks and description, the agents'
prompts) and the results of tools whose output an admin trusts; everything else a tool returned counts as not
ours, internal servers included (the server is ours, the data it hands on is not). Worked out only for writes:
reads pay nothing. An open-world read is not held for its URL in a clean run (an agent that searches and then
fetches what it found names URLs no request held); in a tainted run every one is held already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from apps.agents.policy import WRITES
from apps.registry.provenance import copied, fold, fold_all, unrequested
from apps.runs.engine.model import idempotency_argument


@dataclass(frozen=True)
class Provenance:
    unrequested: tuple[str, ...] = ()  # "path: destination" the request never mentions
    copied: tuple[str, ...] = ()  # argument paths copied from untrusted tool results
    source: str = ""  # the tool whose result the copied text or destination came from, for the reason


def request_text(run: Any) -> str:
    """What the person who started the run and the admins who built the crew asked for, as one text."""
    snapshot = run.snapshot or {}
    parts = [json.dumps(run.inputs or {}, ensure_ascii=False), json.dumps(snapshot.get("crew", {}), ensure_ascii=False)]
    parts += [a.get("system_prompt", "") for a in (snapshot.get("agents") or {}).values()]
    return "\n".join(parts)


def call_provenance(store: Any, *, tool: dict[str, Any] | None, arguments: dict[str, Any]) -> Provenance:
    if not tool or not arguments or tool.get("risk") not in WRITES:
        return Provenance()
    tools = store.run.snapshot.get("tools", {})
    trusted, untrusted = [], []
    for name, text in store.read_results():
        (trusted if (tools.get(name) or {}).get("trusted_output") else untrusted).append((name, text))
    skip = [s for s in (idempotency_argument(tool),) if s]
    request = fold(request_text(store.run))
    known = "\n".join([request, fold_all(t for _, t in trusted)])
    far = unrequested(arguments, known=known, skip=skip)
    results = fold_all(t for _, t in untrusted) if untrusted else ""
    taken = copied(arguments, results=results, known=request, skip=skip)
    source = ""
    if far or taken:
        for name, text in reversed(untrusted):
            one = fold_all([text])
            if any(d.split(": ", 1)[1] in one for d in far) or copied(arguments, results=one, known=request, skip=skip):
                source = name
                break
    return Provenance(unrequested=tuple(far), copied=tuple(taken), source=source)
