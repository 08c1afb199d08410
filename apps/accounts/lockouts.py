"""Sign-in lockouts: who is locked out now, and lifting a lockout early.

django-axes counts failed sign-ins and writes its own tables (settings: Auth); this module is the
one place Airlock reads them or clears them, and each clearing is audited.
"""

from __future__ import annotations

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from axes.utils import reset as axes_reset
from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from apps.accounts import selectors
from apps.accounts.actors import Actor, system_actor
from apps.accounts.models import Membership
from apps.accounts.roles import Role
from apps.audit import services as audit
from apps.core.errors import PermissionDenied, ValidationFailed


def _current_attempts():
    """Failure rows still inside their cool-off (axes counts only those)."""
    return AccessAttempt.objects.filter(attempt_time__gte=timezone.now() - get_cool_off())


def locked_out_emails(*, emails: list[str]) -> set[str]:
    """Which of these accounts cannot sign in now because of failed attempts (from any address)."""
    rows = (_current_attempts().filter(username__in=emails).values("username")
            .annotate(failures=Sum("failures_since_start")).filter(failures__gte=settings.AXES_FAILURE_LIMIT))
    return {row["username"] for row in rows}


def unlock_member(*, actor: Actor, member_id) -> Membership:
    """Clears a member's failed sign-ins, so they can sign in at once. Writes `auth.unlocked`.

    Raises PermissionDenied (needs members.manage; only an owner unlocks an owner), NotFound.
    """
    actor.require("members.manage")
    membership = selectors.get_member(org_id=actor.org_id, member_id=member_id)
    if membership.role == Role.OWNER and actor.role != Role.OWNER:
        raise PermissionDenied("Only an owner can unlock an owner.")
    email = membership.user.email
    with transaction.atomic():
        cleared = axes_reset(username=email)
        audit.record(org_id=actor.org_id, actor=actor, action="auth.unlocked", target=membership,
                     target_label=email, data={"email": email, "attempts_cleared": cleared})
    return membership


def unlock(*, email: str = "", ip: str = "") -> int:
    """The operator path (manage.py unlock_sign_in): clears the failed sign-ins of an account, of an
    address, or both, and returns how many records went. Writes `auth.unlocked` to the account's
    organisations (or the global chain for an address alone). Raises ValidationFailed when given neither."""
    email = selectors.normalize_email(email)
    ip = ip.strip()
    if not email and not ip:
        raise ValidationFailed("Name an account (--email) or an address (--ip) to unlock.")
    user = selectors.user_by_email(email) if email else None
    orgs = [m.org_id for m in selectors.memberships_of(user_id=user.pk)] if user else [None]
    with transaction.atomic():
        cleared = (axes_reset(username=email) if email else 0) + (axes_reset(ip=ip) if ip else 0)
        for org_id in orgs:
            audit.record(org_id=org_id, actor=system_actor(org_id, "operator"), action="auth.unlocked",
                         target_label=email or ip, data={"email": email, "ip": ip, "attempts_cleared": cleared})
    return cleared
