"""Who may see a page: one decorator for every view of an organisation."""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from apps.accounts import selectors
from apps.accounts.actors import Actor, member_actor


def _to_mfa_setup(request) -> HttpResponse:
    """A person whose organisation requires two-factor authentication of their role, without it: every
    page of the organisation (approval decisions included) sends them to set it up first."""
    messages.warning(request, f"{request.membership.org.name} requires two-factor authentication for "
                              f"{request.membership.get_role_display().lower()}s: set it up to continue.")
    url = reverse("mfa_activate_totp")
    if getattr(request, "htmx", False):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


def actor_of(request) -> Actor:
    return member_actor(request.membership, ip=request.META.get("REMOTE_ADDR"))


def member_required(permission: str = "org.view"):
    """Signed in, a member of some organisation, and allowed `permission` there.

    Sets `request.actor`. Raises PermissionDenied (rendered as 403 by apps.web.errors).
    """

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not request.membership:
                return redirect("web:no_org")
            if selectors.must_set_up_mfa(request.membership):
                return _to_mfa_setup(request)
            request.actor = actor_of(request)
            request.actor.require(permission)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
