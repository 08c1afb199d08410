"""The Celery app: reliability settings from shared/reference/security-and-reliability.md.

- Late acks with reject-on-worker-lost: a task whose worker dies is redelivered, so every
  task must be safe to run twice (the run's own rows make that so; redeliveries are counted
  on those rows and capped there).
- Prefetch 1, JSON only, and a task base that refuses anything but ids as arguments.
- Long waits live in database rows swept by beat, never in countdowns.
"""

from __future__ import annotations

import os
import uuid

from celery import Celery
from celery.contrib.django.task import DjangoTask
from celery.schedules import crontab  # noqa: F401  (used by later beat entries)
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_init

from apps.core.queue_order import RESUME_QUEUE

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Celery's Django fixup runs Django's system checks when a worker starts; the URL check imports the
# whole URLconf (the ninja API, every page view, the template engines): ~7 MB a worker never uses.
# The checks run where they matter: `manage.py check --deploy`, migrate, the web process.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

ID_TYPES = (str, int, uuid.UUID, type(None))
# The queues a worker consumes, as `-Q` (runall, the compose file, the tests, the benchmarks, docs/operations.md):
# `resume` first, a run a person just let go on; `runs`, a run's next steps; `default`, everything else.
WORKER_QUEUES = f"{RESUME_QUEUE},runs,default"


class IdOnlyTask(DjangoTask):
    """Tasks carry ids only: a model object or a secret must never reach the broker."""

    def apply_async(self, args=None, kwargs=None, *rest, **options):
        for value in [*(args or ()), *(kwargs or {}).values()]:
            if not isinstance(value, ID_TYPES):
                raise TypeError(f"{self.name}: task arguments must be ids, got {type(value).__name__}")
        args = tuple(str(a) if isinstance(a, uuid.UUID) else a for a in (args or ()))
        kwargs = {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in (kwargs or {}).items()}
        return super().apply_async(args, kwargs, *rest, **options)


app = Celery("airlock", task_cls=IdOnlyTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_default_queue="default",
    # A resume has a queue of its own: a person waits for it, and it must not queue behind every run's next
    # steps (a burst of runs fills `runs`). A worker asks for `resume` before its other queues
    # (apps/core/queue_order.py), so a resume waits for one free child, not for the backlog; a worker given only
    # `-Q resume` keeps children free for decisions alone (docs/operations.md, "Queues"). A run's steps go on
    # `runs`; everything else on `default`, beat's sweeps of runs too: the sweep that takes back a dead worker's
    # run must not wait behind the very backlog of runs (bench/scale.py found it there, 17 sweeps deep).
    task_routes={"apps.runs.tasks.resume_run": {"queue": RESUME_QUEUE},
                 "apps.runs.tasks.execute_run": {"queue": "runs"}},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    # No task here has a rate limit: the consumer skips the token-bucket step for every message.
    worker_disable_rate_limits=True,
    # Exactly one beat sends the schedule: its scheduler waits for the beat lock before opening the
    # schedule file (apps/core/beat_lock.py).
    beat_scheduler="apps.core.beat_lock:LockedScheduler",
    beat_schedule={
        "worker-heartbeat": {"task": "apps.core.tasks.record_worker_heartbeat", "schedule": 30.0},
        "prune-broadcasts": {"task": "apps.core.tasks.prune_broadcasts", "schedule": 60.0},
        "registry-sync-stale-servers": {"task": "apps.registry.tasks.sync_stale_servers", "schedule": 300.0},
        # Often: a dead worker's run is taken over within a lease and a sweep (docs/operations.md).
        "runs-sweep-stuck": {"task": "apps.runs.tasks.sweep_stuck_runs",
                             "schedule": float(os.environ.get("AIRLOCK_RUN_SWEEP_S", "1"))},
        "runs-expire-approvals": {"task": "apps.runs.tasks.expire_approvals", "schedule": 60.0},
        # Bounded passes (apps/runs/retention.py): a backlog is worked through over several hours.
        "runs-apply-retention": {"task": "apps.runs.tasks.apply_retention", "schedule": 3600.0},
        "notifications-retry-deliveries": {"task": "apps.notifications.tasks.retry_due_deliveries",
                                           "schedule": 30.0},
        "notifications-nudge-approvals": {"task": "apps.notifications.tasks.nudge_approvals", "schedule": 60.0},
    },
)
# Celery's Django fixup closes every database connection after each task, so each task opened a new
# Postgres connection (TCP, startup, session setup: a new backend per task) before its first query,
# e.g. between an approval and its call's dispatch. The fixup's own closing is turned off (it closes
# only every 2 x CELERY_DB_REUSE_MAX tasks) and each task boundary follows Django's request rule
# instead: `close_old_connections()` drops a connection past CONN_MAX_AGE, one left in a transaction,
# or one that failed and no longer answers; CONN_HEALTH_CHECKS tests a kept one before its next use.
app.conf.update(CELERY_DB_REUSE_MAX=2**31)


@worker_init.connect
def generic_plans(**_: object) -> None:
    """Before the pool starts (its children inherit it): see apps/core/db.py."""
    from apps.core.db import allow_generic_plans

    allow_generic_plans()


@worker_process_init.connect
def traces(**_: object) -> None:
    """Each pool child exports its own spans (apps/core/tracing.py); nothing when no OTLP endpoint is set."""
    from apps.core import tracing

    tracing.configure("worker")


@task_prerun.connect
@task_postrun.connect
def close_old_connections(task=None, **_: object) -> None:
    if task is not None and getattr(task.request, "is_eager", False):
        return  # runs inside the caller's connection and transaction (tests, eager mode)
    from django.db import close_old_connections as close

    close()


app.autodiscover_tasks()
