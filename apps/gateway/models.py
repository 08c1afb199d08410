"""Gateway identities and the sessions they open.

- `GatewayKey`: a bearer key for one outside MCP host, bound to one agent: that agent's
  allowlist and grants are the key's rules. Only the SHA-256 of the key is stored; the value
  is shown once.
- `GatewaySession`: one MCP session of a key (a handshake-era session id, or for stateless
  2026-07-28 clients a window of activity), recorded as a Run so its tool calls sit in the
  same ledger, run history and trace as the engine's.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.models import TenantModel

DEFAULT_RATE_LIMIT = 120  # calls per minute
DEFAULT_HOLD_WAIT_S = 60  # how long a held call stays open waiting for a person


class GatewayKey(TenantModel):
    name = models.CharField(max_length=100)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="gateway_keys")
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    rate_limit_per_minute = models.PositiveIntegerField(default=DEFAULT_RATE_LIMIT)
    hold_wait_s = models.PositiveIntegerField(default=DEFAULT_HOLD_WAIT_S)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "-created_at"], name="gateway_key_org_recent")]
        ordering = ["revoked_at", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class GatewaySession(TenantModel):
    key = models.ForeignKey(GatewayKey, on_delete=models.CASCADE, related_name="sessions")
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="gateway_session")
    session_id = models.CharField(max_length=100, blank=True)  # the MCP session id; empty when stateless
    client_name = models.CharField(max_length=200, blank=True)
    protocol_version = models.CharField(max_length=20, blank=True)
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["key", "ended_at", "-last_seen_at"], name="gateway_session_key_open")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.key_id} {self.session_id or 'stateless'}"


class OAuthGrant(TenantModel):
    """A person's consent that one OAuth client (an MCP host registered with Airlock's authorization
    server) acts as one agent. The gateway identity behind it is `key`, a GatewayKey with no value of
    its own (its hash is random and never shown): the host's OAuth access token leads to this grant,
    the grant to the key, the key to the agent, its rate and its sessions, as a pasted key would."""

    application = models.ForeignKey("oauth2_provider.Application", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="oauth_grants")
    key = models.OneToOneField(GatewayKey, on_delete=models.CASCADE, related_name="oauth_grant")
    client_name = models.CharField(max_length=200, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["application", "user", "revoked_at"], name="gateway_oauth_grant_app_user")]
        ordering = ["revoked_at", "-created_at"]

    def __str__(self) -> str:
        return f"{self.client_name or self.application_id} as {self.agent_id}"
