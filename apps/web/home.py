"""What the dashboard shows: one read per tile, all from the apps' selectors.

The page and the dashboard socket (`apps/web/consumers.py`) both render `web/dashboard.html#tiles`
from `dashboard_context`, so a live update is exactly what a reload would show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from apps.agents import selectors as agents
from apps.approvals import selectors as approvals
from apps.audit import selectors as audit
from apps.costs import selectors as costs
from apps.costs.models import BudgetScope
from apps.crews import selectors as crews
from apps.registry import selectors as registry
from apps.runs import selectors as runs
from apps.runs.models import RunStatus

# A run "in progress" has not finished; a "failure" is a run that ended badly on its own
# (a person cancelling is not a failure).
IN_PROGRESS = ("running", "waiting", "queued")
FAILED = ("failed", "timed_out", "limit_exceeded")
RECENT_ACTIVITY = 8


@dataclass(frozen=True)
class Step:
    label: str
    url_name: str
    done: bool


def dashboard_context(actor) -> dict[str, Any]:
    org_id = actor.org_id
    now = timezone.now()
    pending = approvals.org_approvals(org_id=org_id, status="pending").aggregate(n=Count("id"),
                                                                                 oldest=Min("created_at"))
    org_runs = runs.org_runs(org_id=org_id)
    by_status = dict(org_runs.filter(status__in=IN_PROGRESS).order_by().values_list("status")
                     .annotate(n=Count("id")))
    day_ago = now - timedelta(hours=24)
    failures = org_runs.filter(status__in=FAILED, finished_at__gte=day_ago).count()

    month = costs.month_start(now)
    spend = costs.spend_total(org_id=org_id, since=month)
    org_budget = next((use for use in costs.budget_use(org_id=org_id) if use.budget.scope == BudgetScope.ORG), None)

    servers = registry.servers_for_org(org_id=org_id)
    server_errors = servers.filter(status="error").count()
    servers_needing_auth = servers.filter(status="needs_auth").count()
    quarantined = registry.tools_for_org(org_id=org_id, state="quarantined").count()

    checklist = [
        Step("Register an MCP server", "servers", servers.exists()),
        Step("Define an agent", "agents", agents.org_agents(org_id=org_id).exists()),
        Step("Build a crew", "crews", crews.org_crews(org_id=org_id).exists()),
        # Done by a person: the demo seed's own run and held call do not tick these off for a newcomer.
        Step("Start a run", "runs", org_runs.filter(started_by__isnull=False).exists()),
        Step("Approve or reject a held call", "inbox",
             approvals.org_approvals(org_id=org_id).filter(decided_by__isnull=False).exists()),
    ]
    return {
        "pending_count": pending["n"],
        "oldest_pending": pending["oldest"],
        "oldest_waited": waited(pending["oldest"], now),
        "runs_in_progress": sum(by_status.values()),
        "runs_by_status": [(RunStatus(s).label.lower(), by_status[s]) for s in IN_PROGRESS if by_status.get(s)],
        "failures_24h": failures,
        "failures_since": day_ago.date().isoformat(),
        # nothing used yet is $0; usage whose every price is unknown stays "unknown", never $0
        "spent_month": Decimal(0) if not spend.calls else spend.cost_usd,
        "unknown_calls_month": spend.unknown_calls,
        "month": month,
        "org_budget": org_budget,
        "server_count": servers.count(),
        "server_errors": server_errors,
        "servers_needing_auth": servers_needing_auth,
        "quarantined_tools": quarantined,
        "checklist": checklist,
        "checklist_done": sum(step.done for step in checklist),
        "show_checklist": not all(step.done for step in checklist),
        "can_view_audit": actor.can("audit.view"),
        "recent_events": list(audit.audit_events(org_id=org_id)[:RECENT_ACTIVITY]) if actor.can("audit.view") else [],
        "recent_runs": [] if actor.can("audit.view") else list(org_runs[:RECENT_ACTIVITY]),
        "now": now,
    }


def waited(since: datetime | None, now: datetime) -> str:
    """'3 h 20 min' style, for the oldest pending approval."""
    if since is None:
        return ""
    minutes = max(0, int((now - since).total_seconds() // 60))
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days"
