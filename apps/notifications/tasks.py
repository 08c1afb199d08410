"""Notification tasks: ids in, one service call each."""

from __future__ import annotations

from celery import shared_task

from apps.notifications import services


@shared_task
def deliver_webhook(delivery_id: str) -> str:
    return services.deliver(delivery_id=delivery_id)


@shared_task
def retry_due_deliveries() -> int:
    return services.retry_due_deliveries()


@shared_task
def send_notification_email(notification_id: str) -> bool:
    return services.send_email(notification_id=notification_id)
