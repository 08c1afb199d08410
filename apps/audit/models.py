"""Append-only, hash-chained audit events.

Each organisation has its own chain: event N stores the hash of event N-1, so editing or
deleting any row breaks every hash after it (`selectors.verify_chain` finds where). Rows are
never updated or deleted by the application; on Postgres a trigger refuses it as well.

Audit sits below accounts in the app order so every service can write its audit row in its
own transaction; it refers to organisations and users by lazy model reference only.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

GLOBAL_CHAIN = uuid.UUID(int=0)  # events with no organisation (e.g. a failed sign-in for an unknown email)


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("Audit events are append-only.")

    def delete(self):
        raise TypeError("Audit events are append-only.")


class AuditEvent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    org = models.ForeignKey("accounts.Organization", null=True, on_delete=models.PROTECT, related_name="+",
                            db_index=False)  # audit_event_org_seq and the other indexes lead with it
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()
    action = models.CharField(max_length=80)
    actor_label = models.CharField(max_length=200)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_token_id = models.UUIDField(null=True, blank=True)
    target_type = models.CharField(max_length=80, blank=True)
    target_id = models.CharField(max_length=80, blank=True)
    target_label = models.CharField(max_length=200, blank=True)
    data = models.JSONField(default=dict)
    ip = models.GenericIPAddressField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "seq"], name="audit_event_org_seq")]
        indexes = [
            models.Index(fields=["org", "-created_at"], name="audit_event_org_recent"),
            models.Index(fields=["org", "action", "-created_at"], name="audit_event_org_action"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_label}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise TypeError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("Audit events are append-only.")


class AuditChainHead(models.Model):
    """The last seq and hash of one organisation's chain; locked while appending."""

    chain = models.UUIDField(primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"chain {self.chain} at {self.seq}"
