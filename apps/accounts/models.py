from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.roles import Role
from apps.core.fields import EncryptedJSONField
from apps.core.models import PublicModel, TenantModel


class Organization(PublicModel):
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, unique=True)
    # Owners, admins and approvers must use two-factor authentication (apps/web/access.py enforces it).
    mfa_required = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.name


class Membership(PublicModel):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "user"], name="membership_org_user")]

    def __str__(self) -> str:
        return f"{self.user.email} ({self.role}) in {self.org.slug}"


class ApiToken(TenantModel):
    """A bearer token for scripts, held by one member. Only its SHA-256 is stored; the value is shown once.

    A token acts as its member: votes count that person, and it never does more than the member's
    current role allows. A token whose member left the organisation (`member` null) stops working.
    """

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=20, choices=Role.choices)
    member = models.ForeignKey(Membership, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="api_tokens")
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "-created_at"], name="api_token_org_recent")]

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and self.member_id is not None

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class IdentityProvider(TenantModel):
    """An organisation's OpenID Connect identity provider (single sign-on), at most one per organisation.

    `client_secret` is write-only: stored encrypted, never rendered back. People whose verified email
    is in `allowed_domains` may sign in through it; one without a membership joins at `default_role`.
    With `sso_required`, the organisation's members cannot sign in with a password.
    """

    name = models.CharField(max_length=80)  # shown on the sign-in page: "Sign in with <name>"
    issuer_url = models.URLField(max_length=500)  # discovery is issuer_url + /.well-known/openid-configuration
    client_id = models.CharField(max_length=200)
    client_secret = EncryptedJSONField()  # {"value": "..."}
    allowed_domains = models.JSONField(default=list)
    default_role = models.CharField(max_length=20, choices=Role.choices, default=Role.VIEWER)
    sso_required = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org"], name="identity_provider_one_per_org")]

    def __str__(self) -> str:
        return f"{self.name} for {self.org_id}"


class Invite(TenantModel):
    """An emailed link that makes its holder a member at `role`: single-use, expiring, revocable.

    Only the SHA-256 of the link's token is stored.
    """

    email = models.EmailField()
    role = models.CharField(max_length=20, choices=Role.choices)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "-created_at"], name="invite_org_recent")]

    @property
    def is_pending(self) -> bool:
        from django.utils import timezone

        return self.accepted_at is None and self.revoked_at is None and self.expires_at > timezone.now()

    def __str__(self) -> str:
        return f"invite {self.email} ({self.role})"
