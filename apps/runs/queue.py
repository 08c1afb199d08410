"""Handing a run to the workers: its next task after the commit that made it ready (`execute_run` on the `runs`
queue; `resume_run`, after a person let it go on, on the `resume` queue: config/celery.py)."""

from __future__ import annotations

from uuid import UUID

from django.db import transaction


def enqueue_on_commit(run_id: UUID | str, *, resume: bool = False) -> None:
    transaction.on_commit(lambda: enqueue(run_id, resume=resume))


def enqueue(run_id: UUID | str, *, resume: bool = False) -> None:
    # Imported here: apps.runs.tasks imports the worker and decisions modules, which import this one.
    from apps.runs import tasks

    (tasks.resume_run if resume else tasks.execute_run).delay(str(run_id))
