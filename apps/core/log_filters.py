"""Log lines nobody reads: Celery's three lines for each run of a task beat sends every second.

The run sweep (`apps.runs.tasks.sweep_stuck_runs`) runs every `AIRLOCK_RUN_SWEEP_S` (1 s), and Celery
logs its sending (beat), its receipt (worker) and its success (worker) at INFO: three lines a second
that bury everything else in a terminal and in a log store. Only those INFO lines are dropped; its
failures (errors of `celery.app.trace`) and every other task's lines are kept.
`AIRLOCK_LOG_SWEEPS=1` keeps them too (to watch the sweep itself).
"""

from __future__ import annotations

import logging

EVERY_SECOND_TASKS = ("apps.runs.tasks.sweep_stuck_runs",)


class DropEverySecondTasks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not any(name in message for name in EVERY_SECOND_TASKS)
