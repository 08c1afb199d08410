"""Who gets asked about a held call: routes per crew and per risk (people, channels), and beat's
reminders before expiry and escalations after a wait, each sent once (an `ApprovalNudge` row is the
claim). Without a route, the org's email preference and Slack connection apply as before.

Routes only choose whom Airlock asks. Who may decide is unchanged (any member with
`approvals.decide`), and every channel decides through the same decision path.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.accounts.models import Membership
from apps.audit import services as audit
from apps.core.errors import NotFound, ValidationFailed
from apps.notifications import slack
from apps.notifications.approval_links import mail_request
from apps.notifications.models import ApprovalNudge, ApprovalRoute

CHANNELS = ("email", "slack")
RISKS = ("read", "write", "dangerous")
APPROVER_ROLES = ("owner", "admin", "approver")


def _emails(org_id: UUID | str, values: list[str], field: str, errors: dict[str, str]) -> list[str]:

    wanted = sorted({(v or "").strip().lower() for v in values or [] if (v or "").strip()})
    known = {e.lower() for e in Membership.objects.filter(org_id=org_id, role__in=APPROVER_ROLES)
             .values_list("user__email", flat=True)}
    if unknown := [e for e in wanted if e not in known]:
        errors[field] = f"Not approvers of this organisation: {', '.join(unknown)}."
    return wanted


def set_route(*, actor: Actor, crew_id: UUID | str | None = None, risk: str = "", people: list[str] | None = None,
              channels: list[str] | None = None, remind_before_minutes: int | None = None,
              escalate_after_minutes: int | None = None, escalate_to: list[str] | None = None) -> ApprovalRoute:
    """Creates or replaces the route for (crew, risk). Raises ValidationFailed with field errors."""
    actor.require("members.manage")
    errors: dict[str, str] = {}
    if risk and risk not in RISKS:
        errors["risk"] = f"Choose one of {', '.join(RISKS)}, or none for any risk."
    if crew_id:
        from apps.crews.models import Crew  # later app: crews sit above notifications; a route names a crew

        if not Crew.objects.filter(org_id=actor.org_id, id=crew_id).exists():
            errors["crew_id"] = "No such crew in this organisation."
    channels = sorted(set(channels or []))
    if bad := [c for c in channels if c not in CHANNELS]:
        errors["channels"] = f"Unknown channels: {', '.join(bad)} (email, slack)."
    people = _emails(actor.org_id, people or [], "people", errors)
    escalate_to = _emails(actor.org_id, escalate_to or [], "escalate_to", errors)
    for field, value in (("remind_before_minutes", remind_before_minutes),
                         ("escalate_after_minutes", escalate_after_minutes)):
        if value is not None and not 1 <= int(value) <= 60 * 24 * 30:
            errors[field] = "Between 1 minute and 30 days."
    if escalate_after_minutes and not escalate_to:
        errors["escalate_to"] = "Name the people to escalate to."
    if errors:
        raise ValidationFailed("The approval route could not be saved.", errors)
    values = {"people": people, "channels": channels, "remind_before_minutes": remind_before_minutes,
              "escalate_after_minutes": escalate_after_minutes, "escalate_to": escalate_to}
    with transaction.atomic():
        route = (ApprovalRoute.objects.select_for_update()
                 .filter(org_id=actor.org_id, crew_id=crew_id or None, risk=risk).first())
        if route is None:
            route = ApprovalRoute.objects.create(org_id=actor.org_id, crew_id=crew_id or None, risk=risk, **values)
        else:
            for key, value in values.items():
                setattr(route, key, value)
            route.save(update_fields=[*values, "updated_at"])
        audit.record(org_id=actor.org_id, actor=actor, action="approval_route.saved", target=route,
                     target_label=f"route crew={crew_id or 'any'} risk={risk or 'any'}",
                     data={**values, "crew_id": str(crew_id) if crew_id else None, "risk": risk})
    return route


def delete_route(*, actor: Actor, route_id: UUID | str) -> None:

    actor.require("members.manage")
    with transaction.atomic():
        route = ApprovalRoute.objects.filter(org_id=actor.org_id, id=route_id).first()
        if route is None:
            raise NotFound("No such approval route.")
        audit.record(org_id=actor.org_id, actor=actor, action="approval_route.deleted", target=route,
                     target_label=f"route crew={route.crew_id or 'any'} risk={route.risk or 'any'}")
        route.delete()


def org_routes(*, org_id: UUID | str) -> list[ApprovalRoute]:
    return list(ApprovalRoute.objects.filter(org_id=org_id).order_by("crew_id", "risk"))


def crew_of(org_id: UUID | str, run_id: UUID | str | None) -> str:
    if not run_id:
        return ""
    from apps.runs.models import Run  # later app: runs notify through this app

    return str(Run.objects.filter(org_id=org_id, id=run_id).values_list("crew_id", flat=True).first() or "")


def route_for(org_id: UUID | str, *, crew_id: str, risk: str) -> ApprovalRoute | None:
    """The most specific route: crew and risk, the crew's, the risk's, then one for any crew and risk."""
    candidates = list(ApprovalRoute.objects.filter(org_id=org_id).filter(
        Q(crew_id=crew_id or None) | Q(crew_id__isnull=True)).filter(Q(risk=risk) | Q(risk="")))

    def rank(route: ApprovalRoute) -> tuple[int, int]:
        return (route.crew_id is not None and str(route.crew_id) == crew_id, route.risk == risk)

    candidates = [r for r in candidates if r.crew_id is None or str(r.crew_id) == crew_id]
    return max(candidates, key=rank) if candidates else None


@dataclass(frozen=True)
class Audience:
    """Whom `notify` tells about a new held call: email addresses, and whether Slack gets the post."""

    emails: list[str]
    slack: bool


def audience(org_id: UUID | str, payload: dict[str, Any]) -> Audience | None:
    """The route's audience for an `approval.requested` of a tool call or a question (a question has no
    risk: the crew's route, or one for any risk); None: no route, the defaults apply."""
    if payload.get("kind") not in ("tool_call", "question") or not ApprovalRoute.objects.filter(org_id=org_id).exists():
        return None  # one query on a held call in an org without routes (the crew lookup is skipped)
    route = route_for(org_id, crew_id=crew_of(org_id, payload.get("run_id")), risk=payload.get("risk") or "")
    if route is None:
        return None
    emails = people_of(org_id, route.people) if "email" in route.channels else []
    return Audience(emails=emails, slack="slack" in route.channels)


def people_of(org_id: UUID | str, emails: list[str]) -> list[str]:
    """The approvers among `emails` (all approvers when empty), as their accounts spell them."""

    members = Membership.objects.filter(org_id=org_id, role__in=APPROVER_ROLES)
    if emails:
        members = members.filter(user__email__in=_spellings(org_id, emails))
    return sorted(members.values_list("user__email", flat=True))


def _spellings(org_id: UUID | str, emails: list[str]) -> list[str]:

    wanted = {e.lower() for e in emails}
    return [e for e in Membership.objects.filter(org_id=org_id).values_list("user__email", flat=True)
            if e.lower() in wanted]


# --- reminders and escalations (beat) -------------------------------------------------------------

def _claim(request: Any, kind: str, recipients: list[str]) -> bool:
    try:
        with transaction.atomic():
            ApprovalNudge.objects.create(org_id=request.org_id, approval_id=request.id, kind=kind,
                                         recipients=recipients)
    except IntegrityError:
        return False
    return True


def _not_voted(request: Any, emails: list[str]) -> list[str]:
    voted = {e.lower() for e in request.votes.values_list("user__email", flat=True) if e}
    return [e for e in emails if e.lower() not in voted]


def nudge_due() -> dict[str, int]:
    """Beat: a reminder to the route's people who have not voted, once, when a pending request is within
    `remind_before_minutes` of expiring; the escalation group asked, once, when it has waited
    `escalate_after_minutes`. Idempotent: the nudge row is written before anything is sent."""
    from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus  # later app: above this one

    now, sent = timezone.now(), {"reminders": 0, "escalations": 0}
    routed = ApprovalRoute.objects.filter(Q(remind_before_minutes__isnull=False) |
                                          Q(escalate_after_minutes__isnull=False)).values_list("org_id", flat=True)
    pending = (ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, kind=ApprovalKind.TOOL_CALL,
                                              org_id__in=set(routed)).select_related("tool", "agent")[:500])
    for request in pending:
        route = route_for(request.org_id, crew_id=crew_of(request.org_id, request.run_id), risk=request.risk)
        if route is None:
            continue
        if (route.remind_before_minutes and request.expires_at
                and request.expires_at - timedelta(minutes=route.remind_before_minutes) <= now < request.expires_at):
            people = _not_voted(request, people_of(request.org_id, route.people))
            if people and _claim(request, "reminder", people):
                sent["reminders"] += _ask(route, request, people, "reminder")
        if route.escalate_after_minutes and request.created_at + timedelta(
                minutes=route.escalate_after_minutes) <= now:
            people = _not_voted(request, people_of(request.org_id, route.escalate_to))
            if people and _claim(request, "escalation", people):
                sent["escalations"] += _ask(route, request, people, "escalation")
    return sent


def _ask(route: ApprovalRoute, request: Any, people: list[str], reason: str) -> int:
    """Asks `people` on the route's channels: their own email links, a mention in the Slack thread.
    Returns 1 when anyone was asked (for beat's count)."""

    asked = mail_request(request=request, emails=people, reason=reason) if "email" in route.channels else 0
    if "slack" in route.channels:
        asked += slack.nudge_thread(request=request, emails=people, reason=reason)
    return min(asked, 1)
