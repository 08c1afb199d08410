"""Who may see a page: one decorator for every view of an organisation."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect

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
