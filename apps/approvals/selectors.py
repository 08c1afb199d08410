"""Tenant-scoped reads of the approval inbox."""

from __future__ import annotations

from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from apps.approvals.models import ApprovalRequest, ApprovalStatus
from apps.core.errors import NotFound


def pending_summary() -> dict[str, tuple[int, float]]:
    """Every organisation's pending items (operators' metrics): slug -> (count, oldest age in seconds)."""
    now = timezone.now()
    rows = (ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).values_list("org__slug")
            .annotate(n=Count("id"), oldest=Min("created_at")).order_by())
    return {slug: (count, max(0.0, (now - oldest).total_seconds())) for slug, count, oldest in rows}


# What an approval shows of its agent and its tool's server is their names (and the server's trust tier): their
# configuration is left in the table. Loading it parsed every JSON column and decrypted the server's secrets for
# each item read (a fifth of a web process's time answering the decision storm of bench/load.py).
UNSHOWN = ("agent__instructions", "agent__in_scope", "agent__out_of_scope", "agent__script",
            "tool__server__env", "tool__server__headers", "tool__server__oauth", "tool__server__oauth_secrets",
            "tool__server__server_info", "tool__server__capabilities", "tool__server__instructions",
            "tool__server__resources", "tool__server__resource_templates", "tool__server__prompts")


def _requests():
    return ApprovalRequest.objects.select_related("agent", "tool__server", "decided_by").defer(*UNSHOWN)


def org_approvals(*, org_id: UUID | str, status: str | None = None, crew_id: UUID | str | None = None,
                  agent_id: UUID | str | None = None, server_id: UUID | str | None = None, risk: str | None = None,
                  kind: str | None = None) -> QuerySet[ApprovalRequest]:
    """Newest first; `status` one of pending/approved/rejected/expired (None: all); the other
    filters narrow by the run's crew, the agent, the tool's server, the risk class and the kind."""
    requests = _requests().filter(org_id=org_id).prefetch_related("votes")
    if status:
        requests = requests.filter(status=status)
    if crew_id:
        requests = requests.filter(context__crew_id=str(crew_id))
    if agent_id:
        requests = requests.filter(agent_id=agent_id)
    if server_id:
        requests = requests.filter(tool__server_id=server_id)
    if risk:
        requests = requests.filter(risk=risk)
    if kind:
        requests = requests.filter(kind=kind)
    return requests.order_by("-created_at")


def get_approval(*, org_id: UUID | str, approval_id: UUID | str) -> ApprovalRequest:
    try:
        return _requests().get(org_id=org_id, id=approval_id)
    except (ApprovalRequest.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such approval request.") from None


def pending_count(*, org_id: UUID | str) -> int:
    return ApprovalRequest.objects.filter(org_id=org_id, status=ApprovalStatus.PENDING).count()


def run_approvals(*, run_id: UUID | str) -> QuerySet[ApprovalRequest]:
    return ApprovalRequest.objects.filter(run_id=run_id).order_by("created_at")


def starter_refusal(request: ApprovalRequest, *, user_id: int | None) -> str:
    """Why this person may not approve the request (empty: they may): the person who started the run
    never approves its dangerous calls, nor any of its calls when the crew separates duties."""
    if user_id is None or user_id != request.requested_by_user_id:
        return ""
    if request.risk == "dangerous":
        return "You started this run, and the tool is dangerous: someone else must approve it."
    if request.separation_of_duties:
        return "You started this run, and its crew separates duties: someone else must approve its calls."
    return ""
