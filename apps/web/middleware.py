from __future__ import annotations

from django.urls import resolve
from django.utils.functional import SimpleLazyObject

from apps.accounts import selectors
from apps.core import log_context

PROBE_PATHS = {"/healthz", "/readyz", "/metrics"}
PROBE_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


class ProbeMiddleware:
    """Answers health checks and metrics scrapes before host validation and the session.

    Probes come from inside the cluster by address (`http://127.0.0.1:8000/readyz`, a Prometheus
    target), which ALLOWED_HOSTS rightly does not list; these answers build no URL from the Host
    header, so skipping its check opens nothing. Everything else goes through the full stack.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path in PROBE_PATHS and request.method in ("GET", "HEAD"):
            response = resolve(request.path).func(request)
            # JSON or text for a machine: nothing to run, frame or load (the pages' policy needs the host).
            response["Content-Security-Policy"] = PROBE_POLICY
            response["X-Frame-Options"] = "DENY"
            response["X-Content-Type-Options"] = "nosniff"
            response["Cache-Control"] = "no-store"
            return response
        return self.get_response(request)  # any other method goes through the whole stack (CSRF included)


class RequestContextMiddleware:
    """Binds the request's id (from the ASGI wrapper, `log_context.RequestIds`, or a new one here under
    WSGI and the test client) with the org and user for every log line written while it is served.
    Org and user come from the session alone: no query is made to label a line."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        bound = log_context.current().get("request_id")
        request.request_id = bound or log_context.request_id(request.headers.get("X-Request-ID", ""))
        session = getattr(request, "session", None)
        org = session.get(selectors.SESSION_ORG_KEY) if session is not None else None
        user = session.get("_auth_user_id") if session is not None else None
        with log_context.bind(request_id=request.request_id, org=org, user=user):
            response = self.get_response(request)
        if not bound:  # the ASGI wrapper adds the header itself
            response["X-Request-ID"] = request.request_id
        return response


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
