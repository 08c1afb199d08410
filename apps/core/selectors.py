from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from apps.core.errors import NotFound
from apps.core.models import WorkerCheck, WorkerHeartbeat
from apps.core.queue_order import RESUME_QUEUE

WORKER_CHECK_PATIENCE = timedelta(minutes=2)


def worker_heartbeats() -> list[WorkerHeartbeat]:
    return list(WorkerHeartbeat.objects.order_by("-seen_at")[:20])


QUEUES = (RESUME_QUEUE, "runs", "default")  # config/celery.py's task_routes
# kombu's Redis transport keeps a message sent with a priority in a list of its own beside the queue's.
_PRIORITY_SUFFIXES = ("", *(f"\x06\x16{step}" for step in (3, 6, 9)))


def queue_depths() -> dict[str, int]:
    """Messages waiting in the broker per queue: Redis lists, or the embedded broker's queue folder."""
    if settings.REDIS_URL:
        with _broker_redis() as (client, prefix):
            return {queue: sum(int(client.llen(f"{prefix}{queue}{suffix}")) for suffix in _PRIORITY_SUFFIXES)
                    for queue in QUEUES}
    waiting = Counter(queue for queue, _ in _folder_messages())
    return {queue: waiting.get(queue, 0) for queue in QUEUES}


def waiting_messages(queues: tuple[str, ...]) -> Iterator[dict]:
    """Every task message the broker holds for `queues`: waiting in line, or (Redis) taken by a worker and not
    yet acknowledged. Each is kombu's envelope (`headers`, `body`, `properties`); `task_arguments` opens one."""
    if settings.REDIS_URL:
        with _broker_redis() as (client, prefix):
            for queue in queues:
                for suffix in _PRIORITY_SUFFIXES:
                    key, start = f"{prefix}{queue}{suffix}", 0
                    while page := client.lrange(key, start, start + _PAGE - 1):  # a deep queue in pieces
                        yield from (json.loads(raw) for raw in page)
                        start += _PAGE
        yield from taken_messages(queues)
        return
    for queue, path in _folder_messages():
        if queue in queues:
            try:
                yield json.loads(path.read_bytes())
            except (OSError, ValueError):  # taken by a worker while we looked
                continue


def taken_messages(queues: tuple[str, ...]) -> Iterator[dict]:
    """The task messages of `queues` a worker has taken and not yet acknowledged (Celery's late acknowledgement:
    the task is running, or waits prefetched in the worker). Redis keeps them in one `unacked` hash for every
    queue, a few per worker child; the embedded broker keeps none (its worker removes a message as it takes it)."""
    if not settings.REDIS_URL:
        return
    with _broker_redis() as (client, prefix):
        for raw in client.hvals(f"{prefix}unacked"):  # [envelope, exchange, routing key]
            envelope, _, routing_key = json.loads(raw)
            if routing_key in queues:
                yield envelope


def task_arguments(envelope: dict) -> tuple[str, list]:
    """(task name, positional arguments) of one of Celery's task messages (protocol 2)."""
    body = envelope.get("body") or ""
    if envelope.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args = json.loads(body)[0] if body else []
    return envelope.get("headers", {}).get("task", ""), list(args)


_PAGE = 1000


@contextmanager
def _broker_redis():
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        yield client, settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    finally:
        client.close()


def _folder_messages() -> Iterator[tuple[str, Path]]:
    """(queue, file) of each message in the embedded broker's queue folder."""
    for message in (Path(settings.BROKER_DIR) / "queue").glob("*.msg"):  # kombu names them <ms>_<uuid>.<queue>.msg
        yield message.name.removesuffix(".msg").rsplit(".", 1)[-1], message


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
