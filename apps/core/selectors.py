from __future__ import annotations

from apps.core.errors import NotFound
from apps.core.models import WorkerCheck, WorkerHeartbeat


def worker_heartbeats() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.order_by("-seen_at")[:20])


def get_worker_check(*, org_id, check_id) -> WorkerCheck:
    """The organisation's check; another organisation's is not found."""
    try:
        return WorkerCheck.objects.get(org_id=org_id, id=check_id)
    except WorkerCheck.DoesNotExist:
        raise NotFound("No such worker check.") from None
