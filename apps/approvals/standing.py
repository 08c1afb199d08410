"""Standing approvals: a person's decision that also covers later calls (ARCHITECTURE.md section 5).

`matching_standing` is the matcher behind the policy input `CallFacts.standing_approval`: the
engine asks it (through its run store) for every proposed call and passes the boolean to
`apps.agents.policy.decide`, which lets it lift only the grant's own holds. It never matches a
`dangerous` tool, a revoked or expired approval, another agent or tool, another run (scope
`run`), or arguments its condition rejects (scope `agent_tool`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents.conditions import ConditionError, parse_condition
from apps.approvals.models import ApprovalRequest, StandingApproval, StandingApprovalHit, StandingScope
from apps.audit import services as audit
from apps.core.errors import Conflict, NotFound, ValidationFailed

MAX_HOURS = 24 * 30


def matching_standing(*, org_id: UUID | str, run_id: UUID | str | None, agent_id: UUID | str | None,
                      tool_id: UUID | str | None, risk: str, arguments: Mapping[str, Any] | None,
                      required_approvals: int = 1, not_by_user_id: int | None = None
                      ) -> StandingApproval | None:
    """The oldest live standing approval covering this call, or None.

    A standing approval is one person's decision: it never covers a call that needs several
    people (`required_approvals` > 1), nor one whose approver may not be `not_by_user_id` (the
    run's starter, when its crew separates duties).
    """
    if risk == "dangerous" or arguments is None or not agent_id or not tool_id or required_approvals > 1:
        return None
    now = timezone.now()
    scope = Q(scope=StandingScope.AGENT_TOOL, expires_at__gt=now)
    if run_id:
        scope |= Q(scope=StandingScope.RUN, run_id=run_id)
    candidates = (StandingApproval.objects.filter(scope, org_id=org_id, agent_id=agent_id, tool_id=tool_id,
                                                  revoked_at__isnull=True).order_by("created_at"))
    if not_by_user_id is not None:
        candidates = candidates.exclude(created_by_id=not_by_user_id)
    for standing in candidates:
        if standing.condition:
            try:
                if not parse_condition(standing.condition).evaluate(arguments):
                    continue
            except ConditionError:
                continue
        return standing
    return None


def record_hit(*, standing_id: UUID | str, run_id: UUID | str | None, tool_call_id: UUID | str | None) -> str:
    """Counts one call a standing approval allowed and records which call (once per call).
    Returns a label naming the standing approval, for the call's reason."""
    standing = StandingApproval.objects.filter(id=standing_id).first()
    if standing is None:
        return str(standing_id)
    label = f"{standing.id} by {standing.created_by_label}"
    try:
        with transaction.atomic():
            StandingApprovalHit.objects.create(org_id=standing.org_id, standing=standing, run_id=run_id,
                                               tool_call_id=tool_call_id)
    except IntegrityError:
        return label
    StandingApproval.objects.filter(id=standing.id).update(hits=F("hits") + 1, last_hit_at=timezone.now())
    return label


def clean_standing(request: ApprovalRequest, standing: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Checks a standing choice made with a decision; None for "this call only". Field errors `standing.*`."""
    scope = (standing or {}).get("scope") or "call"
    if scope == "call":
        return None
    if scope not in StandingScope.values:
        raise ValidationFailed("Choose this call, the rest of this run, or this agent and tool.",
                               {"standing.scope": "Choose call, run or agent_tool."})
    if request.risk == "dangerous":
        raise ValidationFailed("A dangerous tool needs a person for every call: no standing approval.",
                               {"standing.scope": "Not offered for dangerous tools."})
    if request.required_approvals > 1:
        message = (f"This call needs {request.required_approvals} people's approval: one person's standing "
                   "approval cannot cover later ones.")
        raise ValidationFailed(message, {"standing.scope": message})
    if not request.agent_id or not request.tool_id:
        raise ValidationFailed("This request has no agent or tool to cover.", {"standing.scope": "Not available."})
    out: dict[str, Any] = {"scope": scope, "condition": "", "expires_at": None}
    if scope == StandingScope.AGENT_TOOL:
        condition = str((standing or {}).get("condition") or "").strip()
        if condition:
            try:
                parse_condition(condition)
            except ConditionError as exc:
                raise ValidationFailed("The condition is not valid.", {"standing.condition": str(exc)}) from None
        try:
            hours = int((standing or {}).get("hours") or 0)
            if not 1 <= hours <= MAX_HOURS:
                raise ValueError
        except (TypeError, ValueError):
            raise ValidationFailed("Choose for how long.", {"standing.hours": f"Whole hours from 1 to {MAX_HOURS}."}
                                   ) from None
        out.update(condition=condition, expires_at=timezone.now() + timedelta(hours=hours))
    return out


def create_standing(*, actor: Actor, request: ApprovalRequest, scope: str, condition: str = "",
                    expires_at=None) -> StandingApproval:
    """Inside the decision's transaction, after the request was approved."""
    standing = StandingApproval.objects.create(
        org_id=request.org_id, scope=scope, run_id=request.run_id if scope == StandingScope.RUN else None,
        agent_id=request.agent_id, tool_id=request.tool_id, condition=condition, expires_at=expires_at,
        source=request, created_by_id=actor.user_id, created_by_label=actor.label)
    audit.record(org_id=request.org_id, actor=actor, action="standing_approval.created", target=standing,
                 target_label=request.title, data={"scope": scope, "condition": condition,
                                                   "expires_at": expires_at.isoformat() if expires_at else None})
    return standing


def org_standing(*, org_id: UUID | str, live_only: bool = False) -> QuerySet[StandingApproval]:
    rows = StandingApproval.objects.filter(org_id=org_id).select_related("agent", "tool")
    if live_only:
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        rows = rows.filter(live, revoked_at__isnull=True)
    return rows.order_by("-created_at")


def revoke_standing(*, actor: Actor, standing_id: UUID | str) -> StandingApproval:
    actor.require("approvals.decide")
    with transaction.atomic():
        standing = StandingApproval.objects.select_for_update().filter(org_id=actor.org_id, id=standing_id).first()
        if standing is None:
            raise NotFound("No such standing approval.")
        if standing.revoked_at is not None:
            raise Conflict(f"Already revoked by {standing.revoked_by_label}.")
        standing.revoked_at, standing.revoked_by_label = timezone.now(), actor.label
        standing.save(update_fields=["revoked_at", "revoked_by_label", "updated_at"])
        audit.record(org_id=actor.org_id, actor=actor, action="standing_approval.revoked", target=standing,
                     target_label=str(standing.tool_id), data={"hits": standing.hits})
    return standing
