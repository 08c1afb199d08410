from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from apps.core.errors import NotFound
from apps.core.models import WorkerCheck, WorkerHeartbeat

WORKER_CHECK_PATIENCE = timedelta(minutes=2)


def worker_heartbeats() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.order_by("-seen_at")[:20])


QUEUES = ("runs", "default")  # config/celery.py's task_routes


def queue_depths() -> dict[str, int]:
    """Messages waiting in the broker per queue: Redis lists, or the embedded broker's queue folder."""
    if settings.REDIS_URL:
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)
        try:
            prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
            return {queue: int(client.llen(f"{prefix}{queue}")) for queue in QUEUES}
        finally:
            client.close()
    folder = Path(settings.BROKER_DIR) / "queue"
    waiting = Counter()
    for message in folder.glob("*.msg"):  # kombu names them <ms>_<uuid>.<queue>.msg
        waiting[message.name.removesuffix(".msg").rsplit(".", 1)[-1]] += 1
    return {queue: waiting.get(queue, 0) for queue in QUEUES}


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
