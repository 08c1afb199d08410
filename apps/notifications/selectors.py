"""Tenant-scoped reads of webhooks and their deliveries."""

from __future__ import annotations

from uuid import UUID

from django.db.models import QuerySet

from apps.notifications.models import EmailPreference, Webhook, WebhookDelivery


def org_webhooks(*, org_id: UUID | str) -> QuerySet[Webhook]:
    return Webhook.objects.filter(org_id=org_id).order_by("name")


def recent_deliveries(*, org_id: UUID | str, limit: int = 50) -> QuerySet[WebhookDelivery]:
    return (WebhookDelivery.objects.filter(org_id=org_id).select_related("webhook", "notification")
            .order_by("-created_at")[:limit])


def email_events(*, org_id: UUID | str) -> list[str]:
    preference = EmailPreference.objects.filter(org_id=org_id).first()
    return list(preference.events) if preference else []
