"""Trying an agent on its own (from its page), re-running, forking and comparing runs."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from apps.agents import selectors as agents
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.runs import replay, selectors, trial
from apps.runs.models import RunStep, StepKind
from apps.web.access import member_required, post_only


@member_required("runs.start")
def agent_try(request: HttpRequest, agent_id) -> HttpResponse:
    """GET: the agent's page. POST: starts the trial run and opens its page, or shows the error at the form."""
    agent = agents.get_agent(org_id=request.actor.org_id, agent_id=agent_id)
    if request.method != "POST":
        return redirect(reverse("web:agent_detail", args=[agent.id]) + "#try")
    message = request.POST.get("message", "")
    try:
        run = trial.start_trial(actor=request.actor, agent_id=agent.id, message=message)
    except ValidationFailed as exc:
        return render(request, "web/runs/try.html", {"agent": agent, "message": message, "errors": exc.errors,
                                                     "error": exc.message}, status=422)
    messages.success(request, f"Trying {agent.name} on its own: writes it asks for are held as in any run.")
    return redirect("web:run_detail", run_id=run.id)


@post_only
@member_required("runs.start")
def run_rerun(request: HttpRequest, run_id) -> HttpResponse:
    try:
        run = replay.rerun(actor=request.actor, run_id=run_id)
    except (ValidationFailed, Conflict) as exc:
        messages.error(request, " ".join([exc.message, *getattr(exc, "errors", {}).values()]))
        return redirect("web:run_detail", run_id=run_id)
    messages.success(request, "Re-run started with the same inputs on today's configuration.")
    return redirect("web:run_detail", run_id=run.id)


def fork_turns(run) -> list[RunStep]:
    return list(RunStep.objects.filter(run=run, kind=StepKind.AGENT).exclude(task="routing").order_by("position"))


@member_required("runs.start")
def run_fork(request: HttpRequest, run_id) -> HttpResponse:
    """The fork form: which turn to start again from, its task's prompt and the inputs, pre-filled."""
    parent = selectors.get_run(org_id=request.actor.org_id, run_id=run_id)
    turns = fork_turns(parent)
    tasks = {t["name"]: t["description"] for t in (parent.snapshot.get("crew") or {}).get("tasks", [])}
    declared = (parent.snapshot.get("crew") or {}).get("inputs") or []
    chosen = request.POST.get("step") or request.GET.get("step") or (str(turns[0].position) if turns else "")
    turn = next((t for t in turns if str(t.position) == chosen), None)
    prompt = request.POST.get("prompt", tasks.get(turn.task, "") if turn else "")
    values = {i["name"]: request.POST.get(f"input_{i['name']}", parent.inputs.get(i["name"], "")) for i in declared}
    context = {"parent": parent, "turns": turns, "chosen": chosen, "prompt": prompt, "values": values,
               "declared": declared, "tasks": tasks, "errors": {}}
    if request.method == "POST":
        try:
            step = int(chosen)
        except ValueError:
            step = -1
        original = tasks.get(turn.task) if turn else None
        try:
            run = replay.fork(actor=request.actor, run_id=parent.id, step=step,
                              prompt=None if prompt.strip() == (original or "").strip() else prompt, inputs=values)
        except (ValidationFailed, Conflict) as exc:
            return render(request, "web/runs/fork.html", {**context, "errors": getattr(exc, "errors", {}),
                                                          "error": exc.message}, status=422)
        messages.success(request, f"Forked from step {step}: the original run is unchanged.")
        return redirect("web:run_detail", run_id=run.id)
    return render(request, "web/runs/fork.html", context)


@member_required("runs.start")
def run_fork_call(request: HttpRequest, run_id, tool_call_id) -> HttpResponse:
    """Edit one tool call's arguments (JSON, pre-filled) and fork from the model call that proposed it."""
    parent = selectors.get_run(org_id=request.actor.org_id, run_id=run_id)
    call = selectors.run_tool_call(run=parent, tool_call_id=tool_call_id)  # NotFound: 404
    text = request.POST.get("arguments") if request.method == "POST" else None
    if text is None:
        text = json.dumps(call.arguments, indent=2, sort_keys=True, ensure_ascii=False)
    context = {"parent": parent, "call": call, "arguments": text, "errors": {},
               "schema": json.dumps((parent.snapshot.get("tools", {}).get(call.qualified_name) or {})
                                    .get("input_schema") or {}, indent=2, sort_keys=True)}
    if request.method == "POST":
        try:
            try:
                arguments = json.loads(text)
            except ValueError as exc:
                raise ValidationFailed("The arguments are not valid JSON.",
                                       {"arguments": f"Not valid JSON: {exc.msg} (line {exc.lineno})."}) from None
            run = replay.fork_call(actor=request.actor, run_id=parent.id, tool_call_id=call.id, arguments=arguments)
        except (ValidationFailed, Conflict) as exc:
            return render(request, "web/runs/fork_call.html", {**context, "errors": getattr(exc, "errors", {}),
                                                               "error": exc.message}, status=422)
        messages.success(request, f"Forked from the model call of step {call.step.position} with edited arguments "
                                  f"for {call.qualified_name}: the original run is unchanged.")
        return redirect("web:run_detail", run_id=run.id)
    return render(request, "web/runs/fork_call.html", context)


@member_required()
def run_compare(request: HttpRequest) -> HttpResponse:
    """Two runs side by side (`?a=&b=`); with only `a`, its parent or its latest child is the other."""
    org_id, a, b = request.actor.org_id, request.GET.get("a", ""), request.GET.get("b", "")
    try:
        if not b:  # the parent on the left, the newer run on the right
            first = selectors.get_run(org_id=org_id, run_id=a)
            child = first.children.order_by("-created_at").values_list("id", flat=True).first()
            if first.parent_id:
                a, b = str(first.parent_id), str(first.id)
            elif child:
                b = str(child)
            else:
                raise NotFound("This run has no parent or re-run to compare with: pick two runs in the list.")
        comparison = replay.compare(org_id=org_id, a=a, b=b)
    except NotFound as exc:
        return render(request, "web/runs/compare.html", {"error": exc.message}, status=404)
    changes = [(c.path, _json(c.then), _json(c.now)) for c in comparison.config_changes]
    return render(request, "web/runs/compare.html", {"comparison": comparison, "rows": comparison_rows(comparison),
                                                     "changes": changes})


def _json(value) -> str:
    return "(none)" if value is None else json.dumps(value, indent=1, sort_keys=True, default=str)


def comparison_rows(comparison: replay.Comparison) -> list[tuple[str, str, str, bool]]:
    """(label, a, b, differs) for the side-by-side table."""
    a, b = comparison.a.as_dict(), comparison.b.as_dict()
    def money(v):
        return "unknown" if v is None else f"${float(v):.4f}"
    def ms(v):
        return "not finished" if v is None else f"{v / 1000:.1f} s"
    def versions(side):
        agents = ", ".join(f"{k} v{v}" for k, v in sorted(side["agent_versions"].items()))
        crew = f"crew v{side['crew_version']}" if side["crew_version"] is not None else "no crew (agent tried alone)"
        return f"{crew}; {agents}"
    fields = [("Outcome", lambda s: s["status"]), ("Inputs", lambda s: json.dumps(s["inputs"], sort_keys=True)),
              ("Configuration", versions), ("Agent turns", lambda s: str(s["turns"])),
              ("Model calls", lambda s: str(s["model_calls"])), ("Tool calls", lambda s: str(s["tool_calls"])),
              ("Failed or refused calls", lambda s: str(s["failed_calls"])),
              ("Tokens in / out", lambda s: f"{s['tokens_in']} / {s['tokens_out']}"),
              ("Cost", lambda s: money(s["cost_usd"])), ("Duration", lambda s: ms(s["duration_ms"])),
              ("Output", lambda s: s["output"] or s["error"] or "(none)")]
    return [(label, fn(a), fn(b), fn(a) != fn(b)) for label, fn in fields]
