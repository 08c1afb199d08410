"""Who may see a page: one decorator for every view of an organisation."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import Resolver404, resolve

from apps.accounts.actors import Actor, member_actor


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
