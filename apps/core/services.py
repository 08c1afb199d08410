"""Writes of the core app: worker heartbeats and the embedded layer's housekeeping."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.core.models import BroadcastMessage, WorkerCheck, WorkerHeartbeat
from apps.core.realtime import org_group, publish

BROADCAST_RETENTION = timedelta(minutes=5)
WORKER_CHECK_RETENTION = timedelta(hours=1)


def record_worker_heartbeat(*, hostname: str) -> None:
    """Upserts the worker's heartbeat row."""
    WorkerHeartbeat.objects.update_or_create(hostname=hostname, defaults={"seen_at": timezone.now()})


def prune_broadcasts() -> int:
    """Deletes embedded-layer messages every watcher has long since read. Returns how many."""
    deleted, _ = BroadcastMessage.objects.filter(created_at__lt=timezone.now() - BROADCAST_RETENTION).delete()
    return deleted


def answer_worker_check(*, org_id: str, check_id: str, hostname: str) -> None:
    """Records a worker's answer to a "check worker" request and pushes it to the organisation's pages."""
    record_worker_heartbeat(hostname=hostname)
    now = timezone.now()
    WorkerCheck.objects.filter(org_id=org_id, id=check_id).update(answered_at=now, hostname=hostname)
    publish(org_group(org_id), "system.worker_answered", check_id=check_id, hostname=hostname,
            answered_at=now.isoformat())


def request_worker_check(*, org_id: str) -> WorkerCheck:
    """Records a check and enqueues a worker round trip; the answer arrives over the org's
    websocket, and stays readable on the check for a page that swapped its waiting message in late."""
    from apps.core.tasks import check_worker  # tasks import this module: a top-level import would be a cycle

    with transaction.atomic():
        WorkerCheck.objects.filter(org_id=org_id, created_at__lt=timezone.now() - WORKER_CHECK_RETENTION).delete()
        check = WorkerCheck.objects.create(org_id=org_id)
        transaction.on_commit(lambda: check_worker.delay(str(org_id), str(check.id)))
    return check
