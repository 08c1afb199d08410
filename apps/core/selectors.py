from __future__ import annotations

from apps.core.models import WorkerHeartbeat


def worker_heartbeats() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.order_by("-seen_at")[:20])
