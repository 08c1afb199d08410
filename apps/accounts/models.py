from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.accounts.roles import Role
from apps.core.models import PublicModel, TenantModel


class Organization(PublicModel):
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, unique=True)

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
