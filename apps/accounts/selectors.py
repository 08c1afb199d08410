"""Tenant-scoped reads for organisations, members and tokens."""

from __future__ import annotations

import functools
import hashlib
from uuid import UUID

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.accounts.models import ApiToken, IdentityProvider, Invite, Membership, Organization
from apps.core.errors import NotFound
from apps.core.rows import Columns, fetch, split

User = get_user_model()


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def memberships_of(*, user_id: int) -> QuerySet[Membership]:
    return Membership.objects.filter(user_id=user_id).select_related("org").order_by("org__name")


def membership_for(*, user_id: int, org_id: UUID | str) -> Membership | None:
    try:
        return Membership.objects.select_related("org", "user").get(user_id=user_id, org_id=org_id)
    except (Membership.DoesNotExist, ValueError, ValidationError):
        return None


def org_members(*, org_id: UUID) -> QuerySet[Membership]:
    return Membership.objects.filter(org_id=org_id).select_related("user").order_by("user__email")


def get_member(*, org_id: UUID, member_id: UUID | str) -> Membership:
    try:
        return Membership.objects.select_related("user", "org").get(org_id=org_id, id=member_id)
    except (Membership.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such member.") from None


def org_tokens(*, org_id: UUID, include_revoked: bool = True) -> QuerySet[ApiToken]:
    tokens = ApiToken.objects.filter(org_id=org_id).select_related("created_by", "member__user")
    if not include_revoked:
        tokens = tokens.filter(revoked_at__isnull=True)
    return tokens.order_by("revoked_at", "-created_at")


def get_token(*, org_id: UUID, token_id: UUID | str) -> ApiToken:
    try:
        return ApiToken.objects.get(org_id=org_id, id=token_id)
    except (ApiToken.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such token.") from None


def active_token_for(raw: str) -> ApiToken | None:
    """The working token with this value, its member and the member's user (id and email) loaded, or None
    (unknown, revoked, malformed, or its member gone from the organisation look alike).

    Every API request asks this: the statement is built once per process (apps/core/rows.py). Compiled by the
    ORM on each request it was ~1 ms of a request's CPU, several times its round trip."""
    if not raw or len(raw) > 200:
        return None
    token_columns, member_columns, user_columns, sql = _token_read()
    rows = fetch(sql, [hash_token(raw)])
    if not rows:
        return None
    token_row, member_row, user_row = split(rows[0], token_columns, member_columns, user_columns)
    token = token_columns.instance(token_row)
    token.member = member_columns.instance(member_row)
    token.member.user = user_columns.instance(user_row)
    return token if token.is_active else None


@functools.cache
def _token_read() -> tuple[Columns, Columns, Columns, str]:
    """A token by its hash with its member and the member's user: a token whose member left has none (no row)."""
    token = Columns.every(ApiToken, "k")
    member = Columns.every(Membership, "m")
    user = Columns(User, ["id", "email"], "u")
    return token, member, user, (
        f"SELECT {token.sql}, {member.sql}, {user.sql} FROM {token.table} k "  # noqa: S608
        f"JOIN {member.table} m ON m.id = k.member_id JOIN {user.table} u ON u.id = m.user_id WHERE k.token_hash = %s")


def token_holder(*, org_id: UUID, email: str | None = None) -> Membership:
    """The member a token made by an operator belongs to: the one with this email, else the
    organisation's earliest owner."""
    members = Membership.objects.filter(org_id=org_id).select_related("user")
    member = (members.filter(user__username=normalize_email(email)).first() if email
              else members.filter(role="owner").order_by("created_at").first())
    if member is None:
        raise NotFound(f"No member {email!r} in this organisation." if email else "The organisation has no owner.")
    return member


def get_org(*, org_id: UUID) -> Organization:
    return Organization.objects.get(pk=org_id)


def get_org_by_slug(slug: str) -> Organization:
    try:
        return Organization.objects.get(slug=slug)
    except Organization.DoesNotExist:
        raise NotFound(f"No organisation with slug {slug!r}.") from None


def user_by_email(email: str):
    return User.objects.filter(username=normalize_email(email)).first()


def normalize_email(email: str) -> str:
    return email.strip().lower()


SESSION_ORG_KEY = "airlock_org"


def current_membership(*, user, session_org_id: str | None) -> Membership | None:
    """The membership a signed-in user is acting through: the org chosen in the switcher,
    else their first organisation."""
    if not getattr(user, "is_authenticated", False):
        return None
    if session_org_id:
        membership = membership_for(user_id=user.pk, org_id=session_org_id)
        if membership is not None:
            return membership
    return memberships_of(user_id=user.pk).select_related("user").first()


# --- Single sign-on -------------------------------------------------------------------------------

def enabled_identity_providers() -> QuerySet[IdentityProvider]:
    return IdentityProvider.objects.filter(enabled=True).select_related("org").order_by("name")


def identity_provider_for_slug(slug: str) -> IdentityProvider | None:
    """The enabled provider of the organisation with this slug (the provider id in sign-in URLs)."""
    return enabled_identity_providers().filter(org__slug=slug).first()


def identity_provider_of(*, org_id: UUID) -> IdentityProvider | None:
    return IdentityProvider.objects.filter(org_id=org_id).select_related("org").first()


def email_domain_allowed(idp: IdentityProvider, email: str) -> bool:
    domain = normalize_email(email).rpartition("@")[2]
    return bool(domain) and domain in {d.lower() for d in idp.allowed_domains}


def other_organizations_of(*, user_id: int, org_id: UUID) -> list[str]:
    """The names of the organisations this person belongs to besides `org_id`."""
    return list(Membership.objects.filter(user_id=user_id).exclude(org_id=org_id)
                .order_by("org__name").values_list("org__name", flat=True))


def sso_required_for(user) -> IdentityProvider | None:
    """The provider a person must sign in with instead of a password: that of an organisation they
    belong to which requires single sign-on."""
    org_ids = Membership.objects.filter(user_id=user.pk).values("org_id")
    return enabled_identity_providers().filter(sso_required=True, org_id__in=org_ids).first()


# --- Invites --------------------------------------------------------------------------------------

def pending_invites(*, org_id: UUID) -> QuerySet[Invite]:
    from django.utils import timezone

    return (Invite.objects.filter(org_id=org_id, accepted_at__isnull=True, revoked_at__isnull=True,
                                  expires_at__gt=timezone.now())
            .select_related("invited_by").order_by("-created_at"))


def invite_for_token(raw: str) -> Invite | None:
    """The invite this link's token belongs to, whatever its state (the caller says why it no longer works)."""
    if not raw or len(raw) > 200:
        return None
    return Invite.objects.select_related("org").filter(token_hash=hash_token(raw)).first()


# --- Two-factor authentication --------------------------------------------------------------------

MFA_ROLES = frozenset({"owner", "admin", "approver"})  # those an organisation can require it of


def has_totp(user) -> bool:
    from allauth.mfa.models import Authenticator

    return Authenticator.objects.filter(user_id=user.pk, type=Authenticator.Type.TOTP).exists()


def must_set_up_mfa(membership: Membership) -> bool:
    """Whether this member's organisation requires two-factor authentication of their role and they
    have not set it up yet."""
    return membership.org.mfa_required and membership.role in MFA_ROLES and not has_totp(membership.user)
