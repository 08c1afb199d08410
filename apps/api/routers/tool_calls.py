from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Router, Schema
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.runs import decisions, selectors

router = Router(tags=["tool calls"])

States = Literal["proposed", "denied", "held", "approved", "rejected", "expired", "dispatched", "succeeded",
                 "failed", "unknown"]


class ToolCallOut(Schema):
    id: UUID
    run_id: UUID
    crew_name: str
    tool: str
    state: str
    arguments: dict[str, Any]
    decision: str
    reason: str
    result: str | None
    result_is_error: bool | None
    error: str
    resolved_by: str
    created_at: datetime
    dispatched_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_crew_name(obj) -> str:
        return obj.run.crew_name

    @staticmethod
    def resolve_tool(obj) -> str:
        return obj.qualified_name

    @staticmethod
    def resolve_arguments(obj) -> dict[str, Any]:
        return obj.effective_arguments

    @staticmethod
    def resolve_result(obj) -> str | None:
        return obj.result.get("text") if isinstance(obj.result, dict) else None

    @staticmethod
    def resolve_result_is_error(obj) -> bool | None:
        return bool(obj.result.get("is_error")) if isinstance(obj.result, dict) else None


class ResolveIn(Body):
    outcome: Literal["succeeded", "failed"]
    note: str = Field("", max_length=4000, description="What you found; the model reads it as the call's result.")


@router.get("", response=list[ToolCallOut])
@paginate(Pagination)
def list_tool_calls(request, state: States | None = None, run: UUID | None = None):
    """The organisation's tool calls, newest first, of one run (`?run=`) or all. `?state=unknown` lists the
    calls a worker sent and never heard back about: each waits for a person to say whether it happened
    (`POST .../resolve`)."""
    request.auth.require("org.view")
    return selectors.org_tool_calls(org_id=request.auth.org_id, state=state, run_id=run)


@router.get("/{tool_call_id}", response=ToolCallOut)
def get_tool_call(request, tool_call_id: UUID):
    request.auth.require("org.view")
    return selectors.get_tool_call(org_id=request.auth.org_id, tool_call_id=tool_call_id)


@router.post("/{tool_call_id}/resolve", response=ToolCallOut)
def resolve(request, tool_call_id: UUID, payload: ResolveIn):
    """Say what happened to a call whose outcome is `unknown` after checking the target system:
    `succeeded` (it happened) or `failed` (it did not). Airlock never sends the call again; the note
    reaches the model as the call's result, and the run resumes once nothing else is pending.
    Needs approvals.decide; 409 when the call is not `unknown`."""
    decisions.resolve_unknown_call(actor=request.auth, tool_call_id=tool_call_id, outcome=payload.outcome,
                                  note=payload.note)
    return selectors.get_tool_call(org_id=request.auth.org_id, tool_call_id=tool_call_id)
