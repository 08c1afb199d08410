"""Handing a run to the workers: its next task after the commit that made it ready (`execute_run` on the `runs`
queue; `resume_run`, after a person let it go on, on the `resume` queue: config/celery.py)."""

from __future__ import annotations

from uuid import UUID

from django.db import transaction

from apps.core import publish
from apps.core import selectors as broker
from apps.core.queue_order import RESUME_QUEUE

RUN_TASKS = frozenset({"apps.runs.tasks.execute_run", "apps.runs.tasks.resume_run"})


def enqueue_on_commit(run_id: UUID | str, *, resume: bool = False) -> None:
    transaction.on_commit(lambda: enqueue(run_id, resume=resume))


def enqueue(run_id: UUID | str, *, resume: bool = False) -> None:
    # Imported here: apps.runs.tasks imports the worker and decisions modules, which import this one.
    from apps.runs import tasks

    publish.send(tasks.resume_run if resume else tasks.execute_run, str(run_id))


RUN_QUEUES = (RESUME_QUEUE, "runs")


def messages_waiting() -> int:
    """How many messages wait in line on the run queues (read by count, not one by one)."""
    depths = broker.queue_depths()
    return sum(depths[queue] for queue in RUN_QUEUES)


def runs_taken() -> set[str]:
    """The ids of the runs whose task message a worker has taken and not yet acknowledged: running, or prefetched
    by a worker child that will run it next. A few per worker child, so cheap to read whole."""
    return _run_ids(broker.taken_messages(RUN_QUEUES))


def runs_in_line() -> set[str]:
    """The ids of the runs that have a task message in the broker (waiting on `runs` or `resume`, or taken by a
    worker and not yet acknowledged). Read when the sweeper finds queued runs nobody has touched for a while:
    behind a deep backlog their messages are still in line, and only a run missing here was lost."""
    return _run_ids(broker.waiting_messages(RUN_QUEUES))


def _run_ids(envelopes) -> set[str]:
    ids = set()
    for envelope in envelopes:
        task, args = broker.task_arguments(envelope)
        if task in RUN_TASKS and args:
            ids.add(str(args[0]))
    return ids
