"""Run pages (list, detail with the live step tree, start form on the crew page, cancel) and the inbox."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.approvals import selectors as approvals
from apps.core.errors import ValidationFailed
from apps.crews import selectors as crews
from apps.runs import selectors, services
from apps.runs.models import RunStatus
from apps.web.access import member_required


@member_required()
def run_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or None
    runs = selectors.org_runs(org_id=request.actor.org_id, status=status)[:100]
    return render(request, "web/runs/list.html", {"runs": runs, "status": status, "statuses": RunStatus.choices})


def run_context(run) -> dict:
    return {"run": run, "turns": selectors.run_tree(run)}


@member_required()
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.get_run(org_id=request.actor.org_id, run_id=run_id)
    context = {**run_context(run), "can_cancel": request.actor.can("runs.start") and not run.is_finished,
               "can_decide": request.actor.can("approvals.decide")}
    return render(request, "web/runs/detail.html", context)


@require_POST
@member_required("runs.start")
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    services.cancel_run(actor=request.actor, run_id=run_id)
    messages.success(request, "Cancel requested: the run stops at its next step.")
    return redirect("web:run_detail", run_id=run_id)


@member_required("runs.start")
def run_start(request: HttpRequest, crew_id) -> HttpResponse:
    crew = crews.get_crew(org_id=request.actor.org_id, crew_id=crew_id)
    values = {i["name"]: request.POST.get(f"input_{i['name']}", "") for i in crew.inputs}
    if request.method == "POST":
        try:
            run = services.start_run(actor=request.actor, crew_id=crew.id, inputs=values)
        except ValidationFailed as exc:
            return render(request, "web/runs/start.html", {"crew": crew, "values": values, "errors": exc.errors,
                                                           "message": exc.message}, status=422)
        return redirect("web:run_detail", run_id=run.id)
    return render(request, "web/runs/start.html", {"crew": crew, "values": values, "errors": {}})


@member_required()
def inbox(request: HttpRequest) -> HttpResponse:
    pending = approvals.org_approvals(org_id=request.actor.org_id, status="pending")
    recent = approvals.org_approvals(org_id=request.actor.org_id).exclude(status="pending")[:20]
    items = [{"request": r, "arguments": json.dumps(r.arguments, indent=2, sort_keys=True)} for r in pending]
    return render(request, "web/inbox/list.html", {"items": items, "recent": recent,
                                                   "can_decide": request.actor.can("approvals.decide")})


@require_POST
@member_required("approvals.decide")
def inbox_decide(request: HttpRequest, approval_id) -> HttpResponse:
    decision = request.POST.get("decision", "")
    services.decide_approval(actor=request.actor, approval_id=approval_id, decision=decision,
                             comment=request.POST.get("comment", ""))
    messages.success(request, "Approved: the run resumes." if decision == "approve" else "Rejected.")
    target = request.POST.get("next", "")
    return redirect(target if target.startswith("/") and not target.startswith("//") else reverse("web:inbox"))
