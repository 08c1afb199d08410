"""Writes for the inbox items a person answers rather than approves: an agent's question (`human.ask`) and
a server's elicitation (a form built from the schema it sent). A server's sampling request held for a
person is an ordinary approve/reject item (`services.record_vote`).

Who may answer is the item's group (`context["ask"]`): approvers (anyone who may decide approvals),
admins, builders, or any member. Runs own what an answer does to a run (apps/runs/questions.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from django.utils import timezone

from apps.accounts.actors import Actor
from apps.approvals.forms_schema import content_errors
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from apps.approvals.services import already_decided, notification_payload, publish_inbox_count, publish_item
from apps.audit import services as audit
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.notifications.services import notify

GROUP_ROLES = {"approvers": None, "admins": ("admin", "owner"), "builders": ("builder", "admin", "owner"),
               "members": ("viewer", "approver", "builder", "admin", "owner")}
ELICIT_ACTIONS = ("accept", "decline", "cancel")


def open_item(*, org_id: UUID | str, kind: str, run_id: UUID | str | None, tool_call_id: UUID | str | None,
              agent_id: UUID | str | None, tool_id: UUID | str | None, title: str, reason: str,
              context: dict[str, Any], expires_at: datetime | None, requested_by_user_id: int | None,
              arguments: dict[str, Any] | None = None, risk: str = "") -> ApprovalRequest:
    """A pending question, elicitation or sampling item in the inbox. Publishes and notifies after commit."""
    request = ApprovalRequest.objects.create(
        org_id=org_id, kind=kind, run_id=run_id, tool_call_id=tool_call_id, agent_id=agent_id, tool_id=tool_id,
        title=title[:300], arguments=arguments or {}, reason=reason[:500], risk=risk, context=context,
        expires_at=expires_at, requested_by_user_id=requested_by_user_id)
    publish_inbox_count(org_id=org_id)
    publish_item(request)
    notify(org_id=org_id, event="approval.requested", payload=notification_payload(request))
    return request


def may_answer(actor: Actor, request: ApprovalRequest) -> bool:
    roles = GROUP_ROLES.get(request.context.get("ask") or "approvers")
    return actor.can("approvals.decide") if roles is None else actor.role in roles


def clean_answer(request: ApprovalRequest, *, text: str = "", action: str = "",
                 content: dict[str, Any] | None = None) -> dict[str, Any]:
    """The answer as stored. A question takes text (or one of its choices); an elicitation takes an action
    and, to accept, content valid for the server's schema. Raises ValidationFailed with field names."""
    if request.kind == ApprovalKind.QUESTION:
        text = (text or "").strip()
        if not text:
            raise ValidationFailed("Write an answer.", {"answer": "Write an answer."})
        if len(text) > 4000:
            raise ValidationFailed("The answer is too long.", {"answer": "At most 4000 characters."})
        return {"text": text}
    if action not in ELICIT_ACTIONS:
        raise ValidationFailed("Choose accept, decline or cancel.", {"action": "Choose accept, decline or cancel."})
    if action != "accept":
        return {"action": action}

    errors = content_errors(request.context.get("schema") or {}, content)
    if errors:
        raise ValidationFailed("The answer does not fit the form.", errors)
    return {"action": "accept", "content": content}


def record_answer(*, actor: Actor, request: ApprovalRequest, answer: dict[str, Any]) -> ApprovalRequest:
    """A person answers a pending question or elicitation. Caller holds the row lock and cleaned `answer`.
    Writes the request (answered, who, when) and an audit row. Raises PermissionDenied, Conflict."""
    if actor.user_id is None:
        raise PermissionDenied("Only a member can answer.")
    if not may_answer(actor, request):
        raise PermissionDenied(f"This question is for {request.context.get('ask') or 'approvers'}; "
                               f"your role ({actor.role}) is not among them.")
    if request.status != ApprovalStatus.PENDING:
        raise Conflict(already_decided(request))
    request.status, request.answer = ApprovalStatus.ANSWERED, answer
    request.decided_at, request.decided_by_id, request.decided_by_label = timezone.now(), actor.user_id, actor.label
    request.save(update_fields=["status", "answer", "decided_at", "decided_by", "decided_by_label", "updated_at"])
    audit.record(org_id=request.org_id, actor=actor, action=f"{request.kind}.answered", target=request,
                 target_label=request.title, data={"answer": answer})
    publish_inbox_count(org_id=request.org_id)
    publish_item(request)
    notify(org_id=request.org_id, event="approval.decided", payload=notification_payload(request))
    return request
