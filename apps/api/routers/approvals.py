from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Router, Schema
from ninja.pagination import LimitOffsetPagination, paginate

from apps.approvals import selectors
from apps.runs import services

router = Router(tags=["approvals"])


class ApprovalOut(Schema):
    id: UUID
    kind: str
    status: str
    run_id: UUID | None
    tool_call_id: UUID | None
    agent: str | None
    tool: str | None
    title: str
    arguments: dict[str, Any]
    approved_arguments: dict[str, Any] | None
    args_hash: str
    definition_hash: str
    risk: str
    reason: str
    context: dict[str, Any]
    required_approvals: int
    expires_at: datetime | None
    decided_at: datetime | None
    decided_by: str
    comment: str
    created_at: datetime

    @staticmethod
    def resolve_agent(obj) -> str | None:
        return obj.agent.name if obj.agent_id and obj.agent else None

    @staticmethod
    def resolve_tool(obj) -> str | None:
        return obj.tool.qualified_name if obj.tool_id and obj.tool else None

    @staticmethod
    def resolve_decided_by(obj) -> str:
        return obj.decided_by_label


class DecisionIn(Schema):
    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    comment: str = ""


@router.get("", response=list[ApprovalOut])
@paginate(LimitOffsetPagination)
def list_approvals(request, status: Literal["pending", "approved", "rejected", "expired"] | None = None):
    request.auth.require("org.view")
    return selectors.org_approvals(org_id=request.auth.org_id, status=status)


@router.get("/{approval_id}", response=ApprovalOut)
def get_approval(request, approval_id: UUID):
    request.auth.require("org.view")
    return selectors.get_approval(org_id=request.auth.org_id, approval_id=approval_id)


@router.post("/{approval_id}/decision", response=ApprovalOut)
def decide(request, approval_id: UUID, payload: DecisionIn):
    services.decide_approval(actor=request.auth, approval_id=approval_id, decision=payload.decision,
                             arguments=payload.arguments, comment=payload.comment)
    return selectors.get_approval(org_id=request.auth.org_id, approval_id=approval_id)
