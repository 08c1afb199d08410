from __future__ import annotations

from django.conf import settings

from apps.accounts import selectors
from apps.costs import selectors as costs
from apps.web.badges import pending_approvals


def airlock(request) -> dict:
    """Read once per request: a page that renders partials with the request (the inbox's items) would
    otherwise count the inbox again for each one."""
    cached = getattr(request, "_airlock_context", None)
    if cached is None:
        cached = _airlock(request)
        request._airlock_context = cached
    return cached


def _airlock(request) -> dict:
    membership = getattr(request, "membership", None)
    if not membership:
        return {"signup_enabled": settings.AIRLOCK_ALLOW_SIGNUP}
    return {
        "membership": membership,
        "org": membership.org,
        "role": membership.role,
        "memberships": selectors.memberships_of(user_id=request.user.pk),
        "inbox_count": pending_approvals(org_id=membership.org_id),
        "budget_alerts": costs.recent_alerts(org_id=membership.org_id),
        "signup_enabled": settings.AIRLOCK_ALLOW_SIGNUP,
    }
