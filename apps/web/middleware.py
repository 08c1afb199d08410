from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from apps.accounts import selectors


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
