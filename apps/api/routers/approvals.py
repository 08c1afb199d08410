from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Router, Schema
from ninja.pagination import paginate

from apps.api.bodies import Body
from apps.api.pagination import Pagination
from apps.approvals import selectors
from apps.runs import decisions, questions

router = Router(tags=["approvals"])


class ApprovalOut(Schema):
    id: UUID
    kind: str
    status: str
    run_id: UUID | None
    tool_call_id: UUID | None
    agent: str | None
    tool: str | None
    server: str | None
    trust_tier: str | None
    title: str
    arguments: dict[str, Any]
    approved_arguments: dict[str, Any] | None
    args_hash: str
    approved_args_hash: str
    definition_hash: str
    risk: str
    reason: str
    context: dict[str, Any]
    required_approvals: int
    votes: list[dict[str, Any]]
    expires_at: datetime | None
    decided_at: datetime | None
    decided_by: str
    comment: str
    answer: dict[str, Any] | None
    created_at: datetime

    @staticmethod
    def resolve_agent(obj) -> str | None:
        return obj.agent.name if obj.agent_id and obj.agent else None

    @staticmethod
    def resolve_tool(obj) -> str | None:
        return obj.tool.qualified_name if obj.tool_id and obj.tool else None

    @staticmethod
    def resolve_server(obj) -> str | None:
        return obj.tool.server.name if obj.tool_id and obj.tool else obj.context.get("server") or None

    @staticmethod
    def resolve_trust_tier(obj) -> str | None:
        return obj.tool.server.trust_tier if obj.tool_id and obj.tool else obj.context.get("trust_tier") or None

    @staticmethod
    def resolve_votes(obj) -> list[dict[str, Any]]:
        return [{"by": v.actor_label, "decision": v.decision, "comment": v.comment, "at": v.created_at.isoformat()}
                for v in obj.votes.all()]

    @staticmethod
    def resolve_decided_by(obj) -> str:
        return obj.decided_by_label


class StandingIn(Body):
    scope: Literal["call", "run", "agent_tool"] = "call"
    condition: str = ""
    hours: int | None = None


class DecisionIn(Body):
    decision: Literal["approve", "reject", "respond"]  # respond: the comment is the call's result instead
    arguments: dict[str, Any] | None = None
    comment: str = ""
    standing: StandingIn | None = None
    args_hash: str = ""  # the arguments' hash the decider saw (args_hash, or approved_args_hash once edited)


class AnswerIn(Body):
    """A question takes `answer` (text); an elicitation takes `action` and, to accept, `content`."""

    answer: str = ""
    action: Literal["accept", "decline", "cancel", ""] = ""
    content: dict[str, Any] | None = None


@router.get("", response=list[ApprovalOut])
@paginate(Pagination)
def list_approvals(request, status: Literal["pending", "approved", "rejected", "expired", "answered"] | None = None,
                   crew: UUID | None = None, agent: UUID | None = None, server: UUID | None = None,
                   risk: Literal["read", "write", "dangerous"] | None = None,
                   kind: Literal["tool_call", "definition_change", "question", "elicitation",
                                 "sampling"] | None = None):
    """Newest first, filtered by status, the run's crew, agent, the tool's server, risk and kind."""
    request.auth.require("org.view")
    return selectors.org_approvals(org_id=request.auth.org_id, status=status, crew_id=crew, agent_id=agent,
                                   server_id=server, risk=risk, kind=kind)


@router.get("/{approval_id}", response=ApprovalOut)
def get_approval(request, approval_id: UUID):
    request.auth.require("org.view")
    return selectors.get_approval(org_id=request.auth.org_id, approval_id=approval_id)


@router.post("/{approval_id}/decision", response=ApprovalOut)
def decide(request, approval_id: UUID, payload: DecisionIn):
    """Approve (optionally with edited arguments and a standing approval) or reject; 409 when decided."""
    return decisions.decide(actor=request.auth, approval_id=approval_id, decision=payload.decision,
                            arguments=payload.arguments, comment=payload.comment,
                            standing=payload.standing.dict() if payload.standing else None,
                            expected_args_hash=payload.args_hash).request


@router.post("/{approval_id}/answer", response=ApprovalOut)
def answer(request, approval_id: UUID, payload: AnswerIn):
    """Answer an agent's question (`answer`) or a server's elicitation (`action`, `content`); 409 when answered
    or expired, 403 when the question is for another group, 422 with field errors."""
    questions.answer(actor=request.auth, approval_id=approval_id, text=payload.answer, action=payload.action,
                     content=payload.content)
    return selectors.get_approval(org_id=request.auth.org_id, approval_id=approval_id)
