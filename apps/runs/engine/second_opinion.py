"""The run's side of the optional injection classifier (apps/registry/classifier.py): results are handed
over as they are read; a write, before the policy point decides it, waits for every verdict of its run.

Pending verdicts live in this process, keyed by run: one worker drives a run at a time, and a task
settles them all before it ends, so a run that parks (held call) or re-enqueues leaves none behind.
"""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from time import monotonic

from apps.registry import classifier
from apps.runs.engine.seam import Store
from apps.runs.models import ToolCall


@dataclass
class Pending:
    future: Future
    tool_call_id: str
    tool: str


_pending: dict[str, list[Pending]] = {}


def hand_over(store: Store, *, row: ToolCall, text: str) -> None:
    """A result just read goes to the classifier (nothing to do when none is configured or the run is
    already tainted: its writes wait for a person anyway)."""
    if not text or store.run.tainted or not classifier.configured():
        return
    _pending.setdefault(store.run_id, []).append(Pending(classifier.submit(text), str(row.id), row.qualified_name))


def settle(store: Store) -> None:
    """Waits for the run's verdicts (at most the classifier's timeout in all); the first flagged one, or a
    classifier that failed or did not answer, taints the run with the reason."""
    pending = _pending.pop(store.run_id, [])
    if pending:
        store.commit_held()  # a write's completion is not kept back while a verdict is waited for
    deadline = monotonic() + classifier.timeout_s()
    for item in pending:
        if store.run.tainted:
            continue
        call = f"the result of {item.tool} (call {item.tool_call_id[:8]})"
        try:
            verdict = item.future.result(timeout=max(0.0, deadline - monotonic()))
        except FutureTimeout:
            store.taint(f"{call} was not cleared by the injection classifier in time",
                        tool_call_id=item.tool_call_id, tool=item.tool)
            continue
        if verdict.problem:
            store.taint(f"{call} could not be checked: {verdict.problem}", tool_call_id=item.tool_call_id,
                        tool=item.tool)
        elif verdict.flagged:
            store.taint(f"{call} was flagged by the injection classifier (score {verdict.score:.2f})",
                        tool_call_id=item.tool_call_id, tool=item.tool)
