"""Plain factory functions and the personas tests speak about."""

from __future__ import annotations

import itertools

from django.contrib.auth import get_user_model

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.accounts.models import Membership, Organization
from apps.accounts.roles import Role

User = get_user_model()
_seq = itertools.count(1)
PASSWORD = "correct-horse-battery-staple"


def make_user(email: str | None = None, password: str = PASSWORD):
    email = email or f"user{next(_seq)}@example.com"
    return services.ensure_user(email=email, password=password)


def make_org(name: str | None = None, owner_email: str | None = None) -> Organization:
    n = next(_seq)
    owner = make_user(owner_email or f"owner{n}@example.com")
    org, _, _ = services.create_organization(name=name or f"Org {n}", owner_email=owner.email)
    return org


def owner_of(org: Organization) -> Membership:
    return Membership.objects.filter(org=org, role=Role.OWNER).select_related("user", "org").first()


def add_member(org: Organization, role: str, email: str | None = None) -> Membership:
    user = make_user(email)
    membership, _ = services.add_member(actor=member_actor(owner_of(org)), email=user.email, role=role)
    return Membership.objects.select_related("user", "org").get(pk=membership.pk)


def token_for(org: Organization, role: str = Role.ADMIN, name: str = "test", member: Membership | None = None) -> str:
    """A token held by `member` (default: the organisation's owner)."""
    _, raw = services.create_api_token(actor=None, org_id=org.id, name=name, role=role,
                                       member_email=member.user.email if member else None)
    return raw


def wait_for_run(run_id, statuses, timeout: float = 60):
    """The run once its status is one of `statuses` (a real worker drives it), else an error naming where it stayed."""
    import time

    from apps.runs.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(id=run_id)
        if run.status in statuses:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run stayed {run.status}: {run.error}")
