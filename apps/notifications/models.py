"""Outgoing notifications: an org's webhooks, each event to notify, and each delivery attempt's state.

Sits right after accounts so any later app (costs' budget alerts, approvals, runs) can call
`apps.notifications.services.notify`. Deliveries are rows swept by beat (retries with backoff),
never long countdowns.
"""

from __future__ import annotations

from django.db import models

from apps.core.fields import EncryptedJSONField
from apps.core.models import TenantModel

# Events the pages offer; `notify` accepts any dotted name, and a webhook subscribed to "*" gets all.
EVENTS = {
    "approval.requested": "A tool call waits for a person",
    "approval.decided": "A held call was approved, rejected or expired",
    "run.finished": "A run ended (any status)",
    "budget.alert": "A budget crossed a threshold",
}


class Webhook(TenantModel):
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500)
    events = models.JSONField(default=list)  # names from EVENTS, or ["*"]
    secret = EncryptedJSONField()  # {"key": "..."}: signs each body (HMAC-SHA256); write-only
    enabled = models.BooleanField(default=True)
    created_by_label = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def wants(self, event: str) -> bool:
        return self.enabled and ("*" in self.events or event in self.events)


class Notification(TenantModel):
    """One event to tell people about; the payload goes out as the JSON body's `data`."""

    event = models.CharField(max_length=60)
    payload = models.JSONField(default=dict)
    email_to = models.JSONField(default=list, blank=True)  # addresses, when email is on for this event
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (gave up)"


class WebhookDelivery(TenantModel):
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]
        ordering = ["-created_at"]


class EmailPreference(TenantModel):
    """Which events email the org's approvers (owners, admins, approvers) through Django's email backend."""

    events = models.JSONField(default=list)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org"], name="email_preference_org")]


class ApprovalLink(TenantModel):
    """One recipient's link in one approval email: a random token (only its SHA-256 is stored) that
    names the member, the request and the arguments it was mailed with; used once, dead when the
    request is decided or expires. `approval_id` is a UUID: approvals sits above notifications."""

    approval_id = models.UUIDField()
    membership = models.ForeignKey("accounts.Membership", on_delete=models.CASCADE, related_name="+")
    token_hash = models.CharField(max_length=64, unique=True)
    args_hash = models.CharField(max_length=64, blank=True)  # of the arguments the mail showed
    expires_at = models.DateTimeField(null=True, blank=True)  # the request's
    used_at = models.DateTimeField(null=True, blank=True)
    used_for = models.CharField(max_length=10, blank=True)  # approve / reject / respond

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval_id", "membership"], name="approval_link_once")]
        ordering = ["-created_at"]


class SlackConnection(TenantModel):
    """An org's Slack app: bot token and signing secret (encrypted, write-only) and where held calls go:
    `crew_channels` {crew id: channel} first, then `risk_channels` {risk: channel}, then `channel`."""

    credentials = EncryptedJSONField()  # {"bot_token": "xoxb-...", "signing_secret": "..."}
    channel = models.CharField(max_length=100)  # a channel id (C0123...) or name
    risk_channels = models.JSONField(default=dict, blank=True)
    crew_channels = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_by_label = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org"], name="slack_connection_org")]


class SlackPost(TenantModel):
    """The interactive message of one approval request: where it is, to update it once decided."""

    approval_id = models.UUIDField()
    channel = models.CharField(max_length=100)
    ts = models.CharField(max_length=40)
    closed_at = models.DateTimeField(null=True, blank=True)  # updated to show the decision

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval_id"], name="slack_post_once")]


class ApprovalRoute(TenantModel):
    """Who is asked about a held call, and where: for one crew and/or one risk (empty: any). The most
    specific route wins (crew and risk, then crew, then risk). `people` are member emails (empty: every
    owner, admin and approver); `channels` ("email", "slack"); a reminder to those who have not voted
    `remind_before_minutes` before the request expires; `escalate_to` (member emails) asked too once the
    request has waited `escalate_after_minutes`. Who may decide does not change: any approver still can."""

    crew_id = models.UUIDField(null=True, blank=True)
    risk = models.CharField(max_length=10, blank=True)
    people = models.JSONField(default=list, blank=True)
    channels = models.JSONField(default=list, blank=True)
    remind_before_minutes = models.PositiveIntegerField(null=True, blank=True)
    escalate_after_minutes = models.PositiveIntegerField(null=True, blank=True)
    escalate_to = models.JSONField(default=list, blank=True)

    class Meta:
        # One route per (crew, risk): kept by `routing.set_route`, which updates the existing row (a unique
        # constraint would need NULLS NOT DISTINCT, which SQLite, the embedded mode, does not have).
        indexes = [models.Index(fields=["org", "crew_id", "risk"], name="approval_route_key")]


class ApprovalNudge(TenantModel):
    """A reminder or an escalation that was sent for a request: the row is the claim, so beat sends each once."""

    approval_id = models.UUIDField()
    kind = models.CharField(max_length=10)  # reminder / escalation
    recipients = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["approval_id", "kind"], name="approval_nudge_once")]
