"""Re-run, fork and compare runs.

- `rerun`: the parent's inputs on today's configuration (the crew as it is now, or the agent for a trial),
  through the same checks as a new start.
- `fork`: time travel. A new run from one of the parent's agent turns on, with the parent's configuration
  (its snapshot) and an edited task prompt or edited inputs; the outputs of the tasks before that turn are
  carried over, so only that turn and what follows run again. The parent is never written. Forking works for
  sequential crews and tried agents: a supervisor's routing is decided by its model turn by turn, so there is
  no task cursor to rewind to (re-run such a run instead).
- `fork_call`: time travel to one model call. A new run that replays the parent's history up to one of its model
  calls with one tool call's arguments edited (checked against the tool's input schema), then runs those calls
  under policy as any call (a held write is held again) and goes on; the engine plays the replayed call
  (apps/runs/engine/replaying.py) instead of asking the model.
- `compare`: two runs side by side (reads only).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.audit import services as audit
from apps.core.errors import Conflict, ValidationFailed
from apps.costs import selectors as budgets
from apps.runs import history, queue, selectors, services, trial
from apps.runs.engine.model import idempotency_argument
from apps.runs.ledger import append_event, publish_status
from apps.runs.messages import dump_messages, load_messages, turn_messages
from apps.runs.models import CallState, Run, RunOrigin, RunStep, StepKind, ToolCall

MAX_PROMPT = 20_000


def _finished(run: Run, verb: str) -> None:
    if not run.is_finished:
        raise Conflict(f"Only a finished run can be {verb}; this one is {run.get_status_display().lower()}.")


def rerun(*, actor: Actor, run_id: UUID | str) -> Run:
    """The same inputs on today's configuration. Raises Conflict (not finished), ValidationFailed (the crew is
    gone or disabled, its inputs changed, a budget), NotFound, PermissionDenied."""
    actor.require("runs.start")
    parent = selectors.get_run(org_id=actor.org_id, run_id=run_id)
    _finished(parent, "re-run")
    agent_id = trial.trial_agent_id(parent)
    if agent_id:
        return trial.start_trial(actor=actor, agent_id=agent_id, message=parent.inputs.get("message", ""),
                                 parent=parent, origin=RunOrigin.RERUN)
    if parent.crew_id is None:
        raise ValidationFailed("The crew of this run no longer exists.", {"crew": "This crew was deleted."})
    with transaction.atomic():
        run = services.start_run(actor=actor, crew_id=parent.crew_id, inputs=parent.inputs, enqueue=False)
        Run.objects.filter(id=run.id).update(origin=RunOrigin.RERUN, parent=parent)
        run.origin, run.parent = RunOrigin.RERUN, parent
        append_event(run.id, "run.origin", origin=RunOrigin.RERUN, parent_id=str(parent.id))
        queue.enqueue_on_commit(run.id)
    return run


def fork(*, actor: Actor, run_id: UUID | str, step: int, prompt: str | None = None,
         inputs: dict[str, Any] | None = None) -> Run:
    """A new run from the parent's agent turn at position `step` on, with the parent's configuration and,
    optionally, a new prompt for that turn's task and new inputs. Field errors as `step`, `prompt`,
    `inputs.<name>`."""
    actor.require("runs.start")
    parent = selectors.get_run(org_id=actor.org_id, run_id=run_id)
    _finished(parent, "forked")
    snapshot = copy.deepcopy(parent.snapshot)
    crew = snapshot.get("crew") or {}
    if crew.get("process") != "sequential":
        raise ValidationFailed("A supervisor crew's run cannot be forked from a step: its routing has no task "
                               "to rewind to. Re-run it instead.", {"step": "Not available for supervisor crews."})
    turn = (RunStep.objects.filter(run=parent, kind=StepKind.AGENT, position=step).first()
            if isinstance(step, int) and not isinstance(step, bool) else None)
    names = [t["name"] for t in crew.get("tasks", [])]
    if turn is None or turn.task not in names:
        raise ValidationFailed("Pick one of the run's agent turns.", {"step": "Not an agent turn of this run."})
    index = names.index(turn.task)
    if prompt is not None:
        prompt = prompt.strip()
        if not prompt:
            raise ValidationFailed("The prompt cannot be empty.", {"prompt": "Required, or leave it out."})
        if len(prompt) > MAX_PROMPT:
            raise ValidationFailed("The prompt is too long.", {"prompt": f"At most {MAX_PROMPT} characters."})
        crew["tasks"][index]["description"] = prompt
    clean = services.clean_inputs(crew.get("inputs") or [], {**parent.inputs, **(inputs or {})})
    agent_ids = list(snapshot.get("agents") or {})
    refusal = budgets.start_refusal(org_id=actor.org_id, crew_id=parent.crew_id, agent_ids=agent_ids)
    if refusal:
        raise ValidationFailed(refusal, {"crew": refusal})
    before = (parent.state or {}).get("outputs") or {}
    outputs = {name: before[name] for name in names[:index] if name in before}
    state: dict[str, Any] = {"task_index": index, "outputs": outputs,
                             "conclusions": carried_conclusions(parent, outputs)}
    if index and names[index - 1] in outputs:
        state["last_output"] = outputs[names[index - 1]]
    edits = {"prompt": prompt is not None, "inputs": sorted(k for k in clean if clean.get(k) != parent.inputs.get(k))}
    with transaction.atomic():
        run = Run.objects.create(org_id=actor.org_id, crew_id=parent.crew_id, crew_name=parent.crew_name,
                                 inputs=clean, snapshot=snapshot, started_by_id=actor.user_id,
                                 started_by_label=actor.label, state=state, origin=RunOrigin.FORK, parent=parent,
                                 parent_step=step)
        append_event(run.id, "run.queued", crew=run.crew_name, inputs=clean, by=actor.label, origin=RunOrigin.FORK,
                     parent_id=str(parent.id), parent_step=step, task=turn.task, edited=edits)
        audit.record(org_id=actor.org_id, actor=actor, action="run.forked", target=run, target_label=run.crew_name,
                     data={"parent_id": str(parent.id), "step": step, "task": turn.task, "edited": edits,
                           "inputs": clean})
        publish_status(run)
        queue.enqueue_on_commit(run.id)
    return run


def fork_call(*, actor: Actor, run_id: UUID | str, tool_call_id: UUID | str, arguments: Any) -> Run:
    """A new run that replays the parent up to the model call that proposed `tool_call_id`, with that call's
    arguments replaced by `arguments`, and goes on from there under policy. Field errors as `tool_call`,
    `arguments` and `arguments.<path>`. Raises Conflict (not finished), NotFound, PermissionDenied."""
    actor.require("runs.start")
    parent = selectors.get_run(org_id=actor.org_id, run_id=run_id)
    _finished(parent, "forked")
    snapshot = copy.deepcopy(parent.snapshot)
    crew = snapshot.get("crew") or {}
    if crew.get("process") != "sequential":
        raise ValidationFailed("A supervisor crew's run cannot be forked from a step: its routing has no task "
                               "to rewind to. Re-run it instead.", {"tool_call": "Not available for supervisor crews."})
    call = (ToolCall.objects.select_related("step__parent").filter(run=parent, id=tool_call_id).first()
            if _is_uuid(tool_call_id) else None)
    names = [t["name"] for t in crew.get("tasks", [])]
    if call is None or call.step.parent is None or call.step.parent.task not in names:
        raise ValidationFailed("Pick one of the run's tool calls.", {"tool_call": "Not a tool call of this run."})
    _check_arguments(snapshot.get("tools", {}).get(call.qualified_name) or {}, arguments)
    llm, turn = call.step, call.step.parent
    replayed = _replayed_history(turn, llm, call, arguments, snapshot.get("tools", {}).get(call.qualified_name))
    index = names.index(turn.task)
    clean = services.clean_inputs(crew.get("inputs") or [], dict(parent.inputs))
    refusal = budgets.start_refusal(org_id=actor.org_id, crew_id=parent.crew_id,
                                    agent_ids=list(snapshot.get("agents") or {}))
    if refusal:
        raise ValidationFailed(refusal, {"tool_call": refusal})
    before = (parent.state or {}).get("outputs") or {}
    outputs = {name: before[name] for name in names[:index] if name in before}
    state: dict[str, Any] = {"task_index": index, "outputs": outputs,
                             "conclusions": carried_conclusions(parent, outputs),
                             "replay": {"task": turn.task, "messages": replayed, "provider": llm.provider,
                                        "model": llm.model, "tool_call_id": str(call.id)}}
    if index and names[index - 1] in outputs:
        state["last_output"] = outputs[names[index - 1]]
    edits = {"tool_call": str(call.id), "tool": call.qualified_name,
             "arguments": sorted(k for k in set(arguments) | set(call.arguments)
                                 if arguments.get(k) != call.arguments.get(k))}
    with transaction.atomic():
        run = Run.objects.create(org_id=actor.org_id, crew_id=parent.crew_id, crew_name=parent.crew_name,
                                 inputs=clean, snapshot=snapshot, started_by_id=actor.user_id,
                                 started_by_label=actor.label, state=state, origin=RunOrigin.FORK, parent=parent,
                                 parent_step=llm.position)
        append_event(run.id, "run.queued", crew=run.crew_name, inputs=clean, by=actor.label, origin=RunOrigin.FORK,
                     parent_id=str(parent.id), parent_step=llm.position, task=turn.task, edited=edits)
        audit.record(org_id=actor.org_id, actor=actor, action="run.forked", target=run, target_label=run.crew_name,
                     data={"parent_id": str(parent.id), "step": llm.position, "task": turn.task, "edited": edits})
        publish_status(run)
        queue.enqueue_on_commit(run.id)
    return run


def carried_conclusions(parent: Run, outputs: dict[str, str]) -> dict[str, Any]:
    """The carried-over tasks' status and reason (engine/handoff.py) without their evidence: the fork's
    `run.get_result` reads its own run's calls only, and those were the parent's."""
    before = (parent.state or {}).get("conclusions") or {}
    return {name: {**before[name], "evidence": []} for name in outputs if name in before}


def _is_uuid(value: Any) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def _check_arguments(tool: dict[str, Any], arguments: Any) -> None:
    """The edited arguments against the tool's input schema (from the parent's snapshot), field by field."""
    import jsonschema

    if not isinstance(arguments, dict):
        raise ValidationFailed("The arguments must be a JSON object.", {"arguments": "Enter a JSON object."})
    schema = tool.get("input_schema") or {}
    if not schema:
        return
    errors: dict[str, str] = {}
    for error in sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: e.path):
        where = ".".join(str(p) for p in error.absolute_path)
        if not where and error.validator == "required":
            where = error.message.split("'")[1] if "'" in error.message else ""
        errors.setdefault(f"arguments.{where}" if where else "arguments", error.message)
    if errors:
        raise ValidationFailed("The arguments do not fit the tool's input schema.", errors)


def _replayed_history(turn: RunStep, llm: RunStep, call: ToolCall, arguments: dict[str, Any],
                      tool: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The turn's history up to and including the model response of `llm`, that call's arguments edited. The
    response's calls lose the parent's idempotency keys: the fork's calls are new calls (fresh keys)."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.usage import RequestUsage


    history = load_messages(turn_messages(turn))
    nth = RunStep.objects.filter(parent=turn, kind=StepKind.LLM, position__lt=llm.position).count()
    responses = [i for i, m in enumerate(history) if isinstance(m, ModelResponse)]
    if nth >= len(responses):
        raise ValidationFailed("This call's model response is not in the run's history.",
                               {"tool_call": "Its history was not kept."})
    at = responses[nth]
    slot = idempotency_argument(tool)
    parts = []
    for part in history[at].parts:
        if isinstance(part, ToolCallPart):
            args = dict(arguments) if part.tool_call_id == call.call_id else part.args_as_dict()
            if slot and str(args.get(slot) or "").startswith("airlock-"):
                args.pop(slot)
            part = dataclasses.replace(part, args=args)
        parts.append(part)
    response = dataclasses.replace(history[at], parts=parts, usage=RequestUsage())
    return dump_messages([*history[:at], response])


# --- compare -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Side:
    run: Run
    turns: int
    model_calls: int
    failed_calls: int
    duration_ms: int | None
    crew_version: Any
    agent_versions: dict[str, Any]
    outputs: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        run = self.run
        return {"id": str(run.id), "crew_name": run.crew_name, "origin": run.origin,
                "parent_id": str(run.parent_id) if run.parent_id else None, "parent_step": run.parent_step,
                "status": run.status, "inputs": run.inputs, "crew_version": self.crew_version,
                "agent_versions": self.agent_versions, "turns": self.turns, "model_calls": self.model_calls,
                "tool_calls": run.tool_calls, "failed_calls": self.failed_calls, "tokens_in": run.tokens_in,
                "tokens_out": run.tokens_out, "cost_usd": None if run.cost_usd is None else str(run.cost_usd),
                "duration_ms": self.duration_ms, "output": run.output, "error": run.error, "outputs": self.outputs}


FAILED_CALLS = [CallState.FAILED, CallState.DENIED, CallState.REJECTED, CallState.EXPIRED, CallState.UNKNOWN]


def failed_calls_by_run(run_ids: list) -> dict[Any, int]:
    """run id -> its tool calls that failed, were refused, rejected, expired or whose outcome is unknown (a page of
    the runs list at once)."""
    rows = (ToolCall.objects.filter(run_id__in=run_ids, state__in=FAILED_CALLS).order_by().values("run_id")
            .annotate(n=Count("id")).values_list("run_id", "n"))
    return dict(rows)


def duration_text(run: Run) -> str:
    if not run.started_at:
        return ""
    seconds = ((run.finished_at or timezone.now()) - run.started_at).total_seconds()
    text = f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return text if run.finished_at else f"{text} so far"


def side(run: Run) -> Side:
    counts = RunStep.objects.filter(run=run).aggregate(turns=Count("id", filter=Q(kind=StepKind.AGENT)),
                                                       model_calls=Count("id", filter=Q(kind=StepKind.LLM)))
    failed = ToolCall.objects.filter(run=run, state__in=FAILED_CALLS).count()
    duration = (int((run.finished_at - run.started_at).total_seconds() * 1000)
                if run.started_at and run.finished_at else None)
    versions = run.snapshot.get("versions") or {}
    agents = run.snapshot.get("agents") or {}
    return Side(run=run, turns=counts["turns"], model_calls=counts["model_calls"], failed_calls=failed,
                duration_ms=duration, crew_version=versions.get("crew"),
                agent_versions={agents.get(k, {}).get("name", k): v for k, v in (versions.get("agents") or {}).items()},
                outputs=dict((run.state or {}).get("outputs") or {}))


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    config_changes: list[history.Change]

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a.as_dict(), "b": self.b.as_dict(),
                "config_changes": [{"path": c.path, "a": c.then, "b": c.now, "kind": c.kind}
                                   for c in self.config_changes]}


def compare(*, org_id: UUID | str, a: UUID | str, b: UUID | str) -> Comparison:
    """Inputs, configuration versions and differences, steps, tokens, cost and outcome of two runs."""
    run_a, run_b = selectors.get_run(org_id=org_id, run_id=a), selectors.get_run(org_id=org_id, run_id=b)
    return Comparison(a=side(run_a), b=side(run_b),
                      config_changes=history.config_diff(run_a.snapshot, run_b.snapshot))
