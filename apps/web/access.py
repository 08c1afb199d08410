"""Who may see a page: one decorator for every view of an organisation."""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import Resolver404, resolve, reverse

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


def post_only(view):
    """A form's target: POST runs the view; a GET or HEAD (a reload, a pasted address, the back button)
    goes to the nearest page above the address instead of a blank 405. Other methods are refused."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method == "POST":
            return view(request, *args, **kwargs)
        if request.method in ("GET", "HEAD"):
            return redirect(page_above(request.path))
        return HttpResponseNotAllowed(["POST"])

    wrapper.post_only = True
    return wrapper


def page_above(path: str) -> str:
    """The closest ancestor of `path` that is a page (resolves to a view that answers GET)."""
    parts = [p for p in path.split("/") if p]
    while parts:
        parts.pop()
        candidate = "/" + "".join(f"{p}/" for p in parts)
        try:
            match = resolve(candidate)
        except Resolver404:
            continue
        if not getattr(match.func, "post_only", False):
            return candidate
    return "/"
