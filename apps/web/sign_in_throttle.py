"""The hooks django-axes calls for browser sign-in: whose attempt it is, and the page a locked-out
person sees.

Axes counts failures per account and per address (settings: Auth) and refuses every attempt while
either is locked, the right password included.
"""

from __future__ import annotations

import math

from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.accounts.selectors import normalize_email


def attempted_email(request: HttpRequest, credentials: dict | None) -> str:
    """The account an attempt is for, spelled as sign-in spells it, so `Ann@X.com ` and `ann@x.com`
    share one count."""
    value = (credentials or {}).get("username") or request.POST.get("username", "")
    return normalize_email(value)


def locked_out(request: HttpRequest, original_response: HttpResponse | None = None,
               credentials: dict | None = None) -> HttpResponse:
    """429 with what happened and when to try again. Every attempt during a lockout starts its cool-off
    again, so "from now" is exact for the person reading this page."""
    cool_off = get_cool_off(request)
    minutes = max(1, math.ceil(cool_off.total_seconds() / 60))
    response = render(request, "web/auth/locked_out.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
