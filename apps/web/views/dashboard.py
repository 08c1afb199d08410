from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from apps.accounts import selectors as accounts
from apps.audit import selectors as audit
from apps.web.access import member_required

# Shown until the part of Airlock that fills the page exists: what it will hold, honestly.
COMING = {
    "servers": ("Servers", "ti-server-2",
                "Register MCP servers, give each a trust tier, and review every tool they offer."),
    "agents": ("Agents", "ti-robot",
               "Define agents: a model, instructions, scope and an allowlist of tools with a policy each."),
    "crews": ("Crews", "ti-users-group", "Compose agents into sequential pipelines or supervised teams, with limits."),
    "runs": ("Runs", "ti-player-play", "Every run, step by step, live as it happens."),
    "inbox": ("Inbox", "ti-inbox", "Tool calls that policy holds for a person wait here for approval."),
    "costs": ("Costs", "ti-coin", "What each run, agent, crew and model cost, against your budgets."),
}


@member_required()
def dashboard(request: HttpRequest) -> HttpResponse:
    org_id = request.membership.org_id
    context = {
        "member_count": accounts.org_members(org_id=org_id).count(),
        "token_count": accounts.org_tokens(org_id=org_id, include_revoked=False).count(),
        "recent_events": list(audit.audit_events(org_id=org_id)[:8]) if request.actor.can("audit.view") else [],
        "checklist": [
            ("Register an MCP server", "servers"),
            ("Define an agent", "agents"),
            ("Build a crew", "crews"),
            ("Start a run", "runs"),
        ],
    }
    return render(request, "web/dashboard.html", context)


@member_required()
def coming_soon(request: HttpRequest, section: str) -> HttpResponse:
    title, icon, blurb = COMING[section]
    return render(request, "web/coming_soon.html", {"section": section, "title": title, "icon": icon, "blurb": blurb})


def healthz(request: HttpRequest) -> JsonResponse:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
