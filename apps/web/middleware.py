from __future__ import annotations

from django.urls import resolve
from django.utils.functional import SimpleLazyObject

from apps.accounts import selectors

PROBE_PATHS = {"/healthz", "/readyz", "/metrics"}


class ProbeMiddleware:
    """Answers health checks and metrics scrapes before host validation and the session.

    Probes come from inside the cluster by address (`http://127.0.0.1:8000/readyz`, a Prometheus
    target), which ALLOWED_HOSTS rightly does not list; these answers build no URL from the Host
    header, so skipping its check opens nothing. Everything else goes through the full stack.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path in PROBE_PATHS:
            match = resolve(request.path)
            return match.func(request)
        return self.get_response(request)


class CurrentOrganizationMiddleware:
    """Sets `request.membership` (lazily): the signed-in user's membership in the org they chose."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.membership = SimpleLazyObject(
            lambda: selectors.current_membership(
                user=request.user, session_org_id=request.session.get(selectors.SESSION_ORG_KEY)
            )
        )
        return self.get_response(request)
