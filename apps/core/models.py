"""Abstract bases every domain model builds on, and the embedded channel layer's table."""

from __future__ import annotations

import uuid

from django.db import models


class PublicModel(models.Model):
    """A row with a public UUID id (the only id that appears in URLs and the API) and timestamps."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class TenantModel(PublicModel):
    """A row owned by one organisation. Every selector filters on `org`."""

    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+")

    class Meta:
        abstract = True


class BroadcastMessage(models.Model):
    """One group message of the embedded channel layer (no Redis).

    Any process inserts; every web process polls for new rows and delivers them to its own
    websocket consumers. Rows are pruned after a few minutes by beat.
    """

    id = models.BigAutoField(primary_key=True)
    group = models.CharField(max_length=200)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.group} #{self.id}"


class WorkerHeartbeat(models.Model):
    """Last time each Celery worker host answered beat's heartbeat (shown on the System page)."""

    hostname = models.CharField(max_length=200, primary_key=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.hostname


class WorkerCheck(TenantModel):
    """One press of "Check a worker now": the worker's answer is kept here as well as pushed.

    A fast worker can answer before the browser has swapped in the waiting message the answer
    is meant to replace; the page then reads the answer from this row instead of losing it.
    """

    answered_at = models.DateTimeField(null=True)
    hostname = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"worker check {self.id}"
