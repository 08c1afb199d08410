"""Run tasks (queue `runs`; `resume_run` on `resume`, config/celery.py): ids only, each calls one service and
stays short."""

from __future__ import annotations

from celery import shared_task

from apps.core import log_context
from apps.runs import decisions, retention, worker


@shared_task
def execute_run(run_id: str) -> str:
    with log_context.bind(run_id=run_id):
        return worker.advance_run(run_id=run_id)


@shared_task
def resume_run(run_id: str) -> str:
    """The step a person let go (the calls they decided, the question they answered), and no more: the run's
    next steps go on `runs` like any run's. A worker takes `resume` first (apps/core/queue_order.py), so a task
    here must stay that short; one that carried the whole rest of its run held a child a storm of decisions
    was waiting for."""
    with log_context.bind(run_id=run_id):
        return worker.advance_run(run_id=run_id, max_steps=1)


@shared_task
def sweep_stuck_runs() -> int:
    return worker.sweep_stuck_runs()


@shared_task
def expire_approvals() -> int:
    return decisions.expire_due_approvals()


@shared_task
def apply_retention() -> int:
    return sum(done.runs for done in retention.apply_retention())
