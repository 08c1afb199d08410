from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from apps.core import health
from apps.web.access import member_required
from apps.web.home import dashboard_context

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
    """Tiles from `apps.web.home`; the dashboard socket re-renders `#tiles` on the org's events."""
    template = "web/dashboard.html#tiles" if request.htmx else "web/dashboard.html"
    return render(request, template, dashboard_context(request.actor))


@member_required()
def coming_soon(request: HttpRequest, section: str) -> HttpResponse:
    title, icon, blurb = COMING[section]
    return render(request, "web/coming_soon.html", {"section": section, "title": title, "icon": icon, "blurb": blurb})


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers and reaches its database."""
    problem = health.database()
    return JsonResponse({"status": "failing", "problem": problem} if problem else {"status": "ok"},
                        status=503 if problem else 200)


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: database, migrations, Redis, broker; 503 naming what is wrong."""
    problems = health.readiness()
    failing = {name: why for name, why in problems.items() if why}
    checks = {name: why or "ok" for name, why in problems.items()}
    body = {"status": "failing" if failing else "ready", "checks": checks}
    return JsonResponse(body, status=503 if failing else 200)
