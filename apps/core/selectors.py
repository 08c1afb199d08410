from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.core.errors import NotFound
from apps.core.models import WorkerCheck, WorkerHeartbeat

WORKER_CHECK_PATIENCE = timedelta(minutes=2)


def worker_heartbeats() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.order_by("-seen_at")[:20])


def get_worker_check(*, org_id, check_id) -> WorkerCheck:
    """The organisation's check; another organisation's is not found."""
    try:
        return WorkerCheck.objects.get(org_id=org_id, id=check_id)
    except WorkerCheck.DoesNotExist:
        raise NotFound("No such worker check.") from None


def worker_check_state(check: WorkerCheck) -> str:
    """"answered", "waiting", or "silent" once no worker has answered for `WORKER_CHECK_PATIENCE`."""
    if check.answered_at is not None:
        return "answered"
    return "silent" if timezone.now() - check.created_at > WORKER_CHECK_PATIENCE else "waiting"
