from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from django.http import JsonResponse
from ninja import Query, Router, Schema, Status
from ninja.pagination import paginate

from apps.api import idempotency
from apps.api.bodies import Body
from apps.api.instants import Instant
from apps.api.pagination import Pagination
from apps.core.errors import ValidationFailed
from apps.runs import replay, selectors, services, trial

router = Router(tags=["runs"])
crew_runs = Router(tags=["runs"])
agent_runs = Router(tags=["runs"])

RunStatus = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled", "timed_out",
                    "limit_exceeded"]


class RunIn(Body):
    inputs: dict[str, Any] = {}


class TrialIn(Body):
    message: str


class ForkIn(Body):
    step: int | None = None
    prompt: str | None = None
    inputs: dict[str, Any] = {}
    tool_call_id: UUID | None = None  # with `arguments`: fork from the model call that proposed this tool call
    arguments: dict[str, Any] | None = None


class RunOut(Schema):
    id: UUID
    crew_id: UUID | None
    crew_name: str
    origin: str
    parent_id: UUID | None
    parent_step: int | None
    status: str
    inputs: dict[str, Any]
    output: str
    error: str
    error_class: str
    started_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    hops: int
    tool_calls: int
    tokens_in: int
    tokens_out: int
    tokens_cached: int
    cost_usd: Decimal | None
    cost_unknown_calls: int
    tainted: bool
    cancel_requested: bool
    attention: list[dict[str, Any]]
    attention_summary: str

    @staticmethod
    def resolve_started_by(obj) -> str:
        return obj.started_by_label


class EventOut(Schema):
    seq: int
    type: str
    at: datetime
    data: dict[str, Any]


@crew_runs.post("/{crew_id}/runs", response={201: RunOut})
def start_run(request, crew_id: UUID, payload: RunIn):
    """Starts a run. With an `Idempotency-Key` header, a retry within a day answers exactly what the
    first request did (status and body) and starts nothing; the key on another request is a 422."""
    first = idempotency.replay(request)
    if first is None:
        run = services.start_run(actor=request.auth, crew_id=crew_id, inputs=payload.inputs,
                                 idempotency_key=idempotency.key_of(request))
        first = idempotency.remember(request, idempotency.Answer(201, RunOut.from_orm(run).model_dump(mode="json")))
    return JsonResponse(first.body, status=first.status)  # the answer as first sent, byte for byte the same JSON


@agent_runs.post("/{agent_id}/try", response={201: RunOut})
def try_agent(request, agent_id: UUID, payload: TrialIn):
    """Tries one agent on its own with `message` as its input: a run with no crew (`origin` "trial"), under
    the same policy, holds and cost records as any run."""
    return Status(201, trial.start_trial(actor=request.auth, agent_id=agent_id, message=payload.message))


@router.get("", response=list[RunOut])
@paginate(Pagination)
def list_runs(request, status: RunStatus | None = None, crew: UUID | None = None, agent: UUID | None = None,
              since: Instant | None = None, until: Instant | None = None, attention: bool | None = None):
    request.auth.require("org.view")
    return selectors.org_runs(org_id=request.auth.org_id, status=status, crew_id=crew, agent_id=agent, since=since,
                              until=until, attention=attention)


@router.get("/compare", response=dict[str, Any])
def compare_runs(request, a: UUID, b: UUID):
    """Two runs side by side: inputs, configuration versions and differences, steps, tokens, cost, outcome."""
    request.auth.require("org.view")
    return replay.compare(org_id=request.auth.org_id, a=a, b=b).as_dict()


@router.post("/{run_id}/rerun", response={201: RunOut})
def rerun(request, run_id: UUID):
    """The finished run's inputs on today's configuration; the new run's `parent_id` is this run."""
    return Status(201, replay.rerun(actor=request.auth, run_id=run_id))


@router.post("/{run_id}/fork", response={201: RunOut})
def fork(request, run_id: UUID, payload: ForkIn):
    """A new run from the agent turn at position `step` on, with this run's configuration, and optionally a
    new `prompt` for that turn's task and changed `inputs`; or, with `tool_call_id` and `arguments`, a new run that
    replays this one up to the model call that proposed that tool call, with its arguments edited, and goes on
    under policy from there. This run is left as it is."""
    request.auth.require("runs.start")
    selectors.get_run(org_id=request.auth.org_id, run_id=run_id)  # another organisation's run: 404 before any check
    if payload.tool_call_id is not None:
        return Status(201, replay.fork_call(actor=request.auth, run_id=run_id, tool_call_id=payload.tool_call_id,
                                            arguments=payload.arguments if payload.arguments is not None else {}))
    if payload.step is None:
        raise ValidationFailed("Choose a step, or a tool call and its arguments.", {"step": "Required."})
    return Status(201, replay.fork(actor=request.auth, run_id=run_id, step=payload.step, prompt=payload.prompt,
                                   inputs=payload.inputs))


@router.get("/{run_id}", response=RunOut)
def get_run(request, run_id: UUID):
    request.auth.require("org.view")
    return selectors.get_run(org_id=request.auth.org_id, run_id=run_id)


@router.get("/{run_id}/events", response=list[EventOut])
def run_events(request, run_id: UUID, after: int = Query(0, ge=0, le=2**63 - 1),
               limit: int = Query(1000, ge=1, le=1000)):
    request.auth.require("org.view")
    run = selectors.get_run(org_id=request.auth.org_id, run_id=run_id)
    return list(selectors.run_events(run=run, after=after, limit=limit))


@router.post("/{run_id}/cancel", response=RunOut)
def cancel_run(request, run_id: UUID):
    return services.cancel_run(actor=request.auth, run_id=run_id)
