"""Notification tasks: ids in, one service call each."""

from __future__ import annotations

from celery import shared_task

from apps.notifications import routing, services, slack


@shared_task
def deliver_webhook(delivery_id: str) -> str:
    return services.deliver(delivery_id=delivery_id)


@shared_task
def retry_due_deliveries() -> int:
    return services.retry_due_deliveries()


@shared_task
def send_notification_email(notification_id: str) -> bool:
    return services.send_email(notification_id=notification_id)


# Slack unreachable or rate limiting: retried with backoff (posting is once per request, by its row).
SLACK_RETRY = {"autoretry_for": (OSError, slack.SlackError), "retry_backoff": 30, "max_retries": 5}


@shared_task(**SLACK_RETRY)
def post_to_slack(org_id: str, approval_id: str) -> bool:

    return slack.post_approval(org_id=org_id, approval_id=approval_id) is not None


@shared_task(**SLACK_RETRY)
def update_slack(org_id: str, approval_id: str) -> bool:

    return slack.close_post(org_id=org_id, approval_id=approval_id)


@shared_task
def nudge_approvals() -> dict[str, int]:

    return routing.nudge_due()
