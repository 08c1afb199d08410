"""Writes of the core app: worker heartbeats and the embedded layer's housekeeping."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.core.models import BroadcastMessage, WorkerHeartbeat
from apps.core.realtime import org_group, publish

BROADCAST_RETENTION = timedelta(minutes=5)


def record_worker_heartbeat(*, hostname: str) -> None:
    """Upserts the worker's heartbeat row."""
    WorkerHeartbeat.objects.update_or_create(hostname=hostname, defaults={"seen_at": timezone.now()})


def prune_broadcasts() -> int:
    """Deletes embedded-layer messages every watcher has long since read. Returns how many."""
    deleted, _ = BroadcastMessage.objects.filter(created_at__lt=timezone.now() - BROADCAST_RETENTION).delete()
    return deleted


def answer_worker_check(*, org_id: str, check_id: str, hostname: str) -> None:
    """Publishes a worker's answer to a "check worker" request to the organisation's pages."""
    record_worker_heartbeat(hostname=hostname)
    publish(org_group(org_id), "system.worker_answered", check_id=check_id, hostname=hostname,
            answered_at=timezone.now().isoformat())


def request_worker_check(*, org_id: str, check_id: str) -> None:
    """Enqueues a worker round trip; the answer arrives over the org's websocket."""
    from apps.core.tasks import check_worker

    check_worker.delay(org_id, check_id)
