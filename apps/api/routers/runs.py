from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from ninja import Router, Schema, Status
from ninja.pagination import paginate

from apps.api.instants import Instant
from apps.api.pagination import Pagination
from apps.runs import selectors, services

router = Router(tags=["runs"])
crew_runs = Router(tags=["runs"])


class RunIn(Schema):
    inputs: dict[str, Any] = {}


class RunOut(Schema):
    id: UUID
    crew_id: UUID | None
    crew_name: str
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


@crew_runs.post("/{crew_id}/runs", response={201: RunOut, 200: RunOut})
def start_run(request, crew_id: UUID, payload: RunIn):
    key = request.headers.get("Idempotency-Key")
    run = services.start_run(actor=request.auth, crew_id=crew_id, inputs=payload.inputs, idempotency_key=key)
    return Status(201, run)


@router.get("", response=list[RunOut])
@paginate(Pagination)
def list_runs(request, status: str | None = None, crew: UUID | None = None, agent: UUID | None = None,
              since: Instant | None = None, until: Instant | None = None, attention: bool | None = None):
    request.auth.require("org.view")
    return selectors.org_runs(org_id=request.auth.org_id, status=status, crew_id=crew, agent_id=agent, since=since,
                              until=until, attention=attention)


@router.get("/{run_id}", response=RunOut)
def get_run(request, run_id: UUID):
    request.auth.require("org.view")
    return selectors.get_run(org_id=request.auth.org_id, run_id=run_id)


@router.get("/{run_id}/events", response=list[EventOut])
def run_events(request, run_id: UUID, after: int = 0, limit: int = 1000):
    request.auth.require("org.view")
    run = selectors.get_run(org_id=request.auth.org_id, run_id=run_id)
    return list(selectors.run_events(run=run, after=after, limit=min(max(limit, 1), 1000)))


@router.post("/{run_id}/cancel", response=RunOut)
def cancel_run(request, run_id: UUID):
    return services.cancel_run(actor=request.auth, run_id=run_id)
