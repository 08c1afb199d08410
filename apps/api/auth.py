"""API authentication: bearer tokens for scripts, the browser session (with CSRF) for pages.

Both resolve to an `Actor` bound to one organisation; `request.auth` is that actor.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from apps.accounts import selectors, services
from apps.accounts.actors import Actor, member_actor, token_actor
from apps.api import lockout
from apps.core import log_context


def client_ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


class BearerTokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Actor | None:
        """The token's member, or None (401). Raises lockout.LockedOut (429) while the address or the
        token's prefix is locked out after too many failed tokens."""
        ip = client_ip(request)
        lockout.check(ip=ip, token=token, token_prefix=services.TOKEN_PREFIX)
        api_token = selectors.active_token_for(token)
        if api_token is None:
            lockout.note_failure(ip=ip, token=token, token_prefix=services.TOKEN_PREFIX)
            return None
        services.note_token_used(token=api_token)
        actor = token_actor(api_token, ip=client_ip(request))
        log_context.add(org=actor.org_id, actor=actor.label)
        return actor


class SessionMemberAuth(SessionAuth):
    """Session cookie auth. ninja's APIKeyCookie enforces CSRF on unsafe methods."""

    def _get_key(self, request: HttpRequest) -> str | None:
        # No session cookie, or one that signs nobody in: not ours to judge (a bad bearer token or
        # a stale cookie must give 401, not a CSRF 403). A signed-in session is CSRF-checked.
        if self.param_name not in request.COOKIES or not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Actor | None:
        membership = selectors.current_membership(
            user=request.user, session_org_id=request.session.get(selectors.SESSION_ORG_KEY)
        )
        if membership is None:
            return None
        actor = member_actor(membership, ip=client_ip(request))
        log_context.add(org=actor.org_id, actor=actor.label)
        return actor


API_AUTH = [BearerTokenAuth(), SessionMemberAuth()]
