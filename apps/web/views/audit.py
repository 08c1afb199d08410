"""The audit log: filters, redacted before/after diffs, CSV export (apps/web/views/exports.py) and a
"verify chain" action that recomputes every hash and names the first broken link."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from apps.audit import selectors
from apps.audit.models import AuditEvent
from apps.audit.redaction import redact
from apps.web.access import member_required, post_only
from apps.web.forms import AuditFilterForm


def _day_start(day) -> datetime | None:
    return timezone.make_aware(datetime.combine(day, time.min)) if day else None


def audit_filters(form: AuditFilterForm) -> dict[str, Any]:
    filters = form.cleaned_data if form.is_valid() else {}
    until = filters.get("until")
    return {"since": _day_start(filters.get("since")),
            "until": _day_start(until) + timezone.timedelta(days=1) if until else None,
            "actor": filters.get("actor", ""), "action": filters.get("action", "")}


def changes(data: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for an event that recorded both sides (redacted again, in case)."""
    before, after = data.get("before"), data.get("after")
    if not isinstance(after, dict):
        return []
    before = before if isinstance(before, dict) else {}
    before, after = redact(before), redact(after)
    return [(k, before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]


@member_required("audit.view")
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    events = selectors.audit_events(org_id=request.actor.org_id, **audit_filters(form))
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "rows": [(e, changes(e.data), {k: v for k, v in e.data.items() if k not in ("before", "after")})
                 for e in page],
        "query": query.urlencode(),
        "actions": selectors.audit_actions(org_id=request.actor.org_id),
        "chain": selectors.verify_chain(org_id=request.actor.org_id),
    }
    template = "web/audit.html#audit-table" if request.htmx else "web/audit.html"
    return render(request, template, context)


@post_only
@member_required("audit.view")
def audit_verify(request: HttpRequest) -> HttpResponse:
    """Recomputes the chain now and reports the first event whose hash does not match (htmx partial)."""
    check = selectors.verify_chain(org_id=request.actor.org_id)
    broken = None
    if not check.intact:
        broken = AuditEvent.objects.filter(org_id=request.actor.org_id, seq=check.broken_at_seq).first()
    return render(request, "web/audit.html#chain-result", {"check": check, "broken": broken,
                                                            "checked_at": timezone.now()})
