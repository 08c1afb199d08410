"""The inbox's triage order and filters beyond `selectors.org_approvals`: oldest first by default, by expiry
or risk, by tool and by how long an item has waited. Reads only, tenant-scoped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db.models import Case, F, IntegerField, QuerySet, Value, When
from django.utils import timezone

from apps.approvals import selectors
from apps.approvals.models import ApprovalRequest

SORTS = {"oldest": "Oldest first", "newest": "Newest first", "expiry": "Expiring soonest", "risk": "Riskiest first"}
AGES = {"15m": ("waiting over 15 min", timedelta(minutes=15)), "1h": ("waiting over 1 hour", timedelta(hours=1)),
        "4h": ("waiting over 4 hours", timedelta(hours=4)), "1d": ("waiting over a day", timedelta(days=1))}
RISK_RANK = Case(When(risk="dangerous", then=Value(0)), When(risk="write", then=Value(1)),
                 When(risk="read", then=Value(2)), default=Value(3), output_field=IntegerField())


def pending(*, org_id: UUID | str, sort: str = "oldest", tool: str = "", age: str = "",
            **filters: Any) -> QuerySet[ApprovalRequest]:
    """Pending requests in triage order; `filters` as in `selectors.org_approvals` (crew_id, agent_id, ...)."""
    requests = selectors.org_approvals(org_id=org_id, status="pending", **filters)
    if tool:
        requests = requests.filter(tool__qualified_name=tool)
    if age in AGES:
        requests = requests.filter(created_at__lte=timezone.now() - AGES[age][1])
    if sort == "newest":
        return requests.order_by("-created_at")
    if sort == "expiry":
        return requests.order_by(F("expires_at").asc(nulls_last=True), "created_at")
    if sort == "risk":
        return requests.annotate(risk_rank=RISK_RANK).order_by("risk_rank", "created_at")
    return requests.order_by("created_at")


def pending_tools(*, org_id: UUID | str) -> list[str]:
    """The tools that have something pending, for the tool filter."""
    return list(ApprovalRequest.objects.filter(org_id=org_id, status="pending", tool__isnull=False)
                .order_by("tool__qualified_name").values_list("tool__qualified_name", flat=True).distinct())
