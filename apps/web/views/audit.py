from __future__ import annotations

from datetime import datetime, time

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from apps.audit import selectors
from apps.web.access import member_required
from apps.web.forms import AuditFilterForm


def _day_start(day) -> datetime | None:
    return timezone.make_aware(datetime.combine(day, time.min)) if day else None


@member_required("audit.view")
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    until = filters.get("until")
    events = selectors.audit_events(
        org_id=request.actor.org_id,
        since=_day_start(filters.get("since")),
        until=_day_start(until) + timezone.timedelta(days=1) if until else None,
        actor=filters.get("actor", ""),
        action=filters.get("action", ""),
    )
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "actions": selectors.audit_actions(org_id=request.actor.org_id),
        "chain": selectors.verify_chain(org_id=request.actor.org_id),
    }
    template = "web/audit.html#audit-table" if request.htmx else "web/audit.html"
    return render(request, template, context)
