"""The System page: which mode Airlock runs in, whether workers answer."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from apps.core import selectors, services
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.runs import retention
from apps.web.access import member_required, post_only


@member_required()
def system(request: HttpRequest) -> HttpResponse:
    context = {
        "embedded": settings.EMBEDDED,
        "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        "broker": "filesystem (embedded)" if settings.EMBEDDED else "Redis",
        "layer": "database-backed (embedded)" if settings.EMBEDDED else "Redis",
        "heartbeats": selectors.worker_heartbeats(),
        "retention_days": retention.retention_days(org_id=request.actor.org_id),
        "can_manage": request.actor.can("members.manage"),
    }
    return render(request, "web/settings/system.html", context)


@post_only
@member_required()
def set_retention(request: HttpRequest) -> HttpResponse:
    raw = request.POST.get("days", "").strip()
    try:
        days = retention.set_retention(actor=request.actor, days=int(raw) if raw else None)
    except ValueError:
        messages.error(request, f"Retention: {raw!r} is not a number of days.")
    except (ValidationFailed, PermissionDenied) as exc:
        messages.error(request, f"Retention: {exc.message}")
    else:
        messages.success(request, f"Finished runs keep their detail for {days} days." if days
                         else "Finished runs keep their detail forever.")
    return redirect(reverse("web:system") + "#retention")


@post_only
@member_required()
def check_worker(request: HttpRequest) -> HttpResponse:
    check = services.request_worker_check(org_id=str(request.actor.org_id))
    return render(request, "web/partials/_worker_check.html", {"check_id": check.id, "state": "waiting"})


@require_GET
@member_required()
def worker_check(request: HttpRequest, check_id) -> HttpResponse:
    """The waiting message asks once on arrival, then every few seconds: the answer when there is one,
    else 204 (htmx swaps nothing), so an answer pushed before the message existed is not lost; after
    two minutes without one, a message that stops asking and says what to start."""
    check = selectors.get_worker_check(org_id=request.actor.org_id, check_id=check_id)
    state = selectors.worker_check_state(check)
    if state == "waiting":
        return HttpResponse(status=204)
    return render(request, "web/partials/_worker_check.html",
                  {"check_id": check.id, "state": state, "hostname": check.hostname})
