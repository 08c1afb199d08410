"""Content-Security-Policy on every response: scripts, styles, fonts and images from this origin
only, no inline scripts or event handlers, no eval, no framing, forms and websockets to this
origin only. Page scripts live in static/js/ (docs/contributing.md).

A small middleware rather than a package: one fixed policy, plus the websocket origin, which
depends on the host the page was served from.
"""

from __future__ import annotations

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"


def policy(request: HttpRequest) -> str:
    """`request.csp_form_targets` (origins) may widen form-action for one page: the sign-in page's "Sign in
    with <provider>" forms POST here and are redirected to the provider, and browsers hold a form's
    redirects to form-action too."""
    host = request.get_host()
    form_targets = " ".join(["'self'", *getattr(request, "csp_form_targets", ())])
    websocket = f"wss://{host}" if request.is_secure() else f"ws://{host} wss://{host}"
    return "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "script-src-attr 'none'",  # no onclick=..., whatever script-src says
        "style-src 'self'",
        "style-src-attr 'unsafe-inline'",  # style="..." attributes only; no <style> blocks
        "img-src 'self' data:",  # Tabler's form controls draw with data: SVGs
        "font-src 'self'",
        f"connect-src 'self' {websocket}",
        "object-src 'none'",
        "base-uri 'self'",
        f"form-action {form_targets}",
        "frame-ancestors 'none'",
    ])


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if HEADER not in response:
            try:
                response[HEADER] = policy(request)
            except DisallowedHost:  # Django answers 400; the fallback needs no host
                response[HEADER] = "default-src 'self'; frame-ancestors 'none'"
        return response
