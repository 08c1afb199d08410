from __future__ import annotations

import socket

from celery import shared_task

from apps.core import services


@shared_task
def record_worker_heartbeat() -> None:
    services.record_worker_heartbeat(hostname=socket.gethostname())


@shared_task
def prune_broadcasts() -> None:
    services.prune_broadcasts()


@shared_task
def check_worker(org_id: str, check_id: str) -> None:
    """A round trip through the broker and back to the browser, for the System page."""
    services.answer_worker_check(org_id=org_id, check_id=check_id, hostname=socket.gethostname())
