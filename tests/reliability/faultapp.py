"""The Celery app of the fault tests' workers and beat (`celery -A tests.reliability.faultapp`):
Airlock's own app, with

- beat sweeping stuck runs as in production (every AIRLOCK_RUN_SWEEP_S) and nothing else;
- a poison switch: a run whose id is listed in the file FAULTS_POISON_FILE kills the pool process
  that claimed it (SIGKILL, right after the claim), every time it is delivered. Each kill is
  appended to FAULTS_POISON_FILE + ".kills";
- a kill-once switch: a line `<run id> <n>` in the file FAULTS_KILL_ONCE_FILE kills the pool process that
  drives that run before the n-th engine step of its task (1: right after the claim) and is taken off the
  list: a worker lost at a step boundary, once. Each kill is appended to FAULTS_KILL_ONCE_FILE + ".kills"
  as `<run id> <pid> <unix time>`.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

from celery.signals import worker_process_init

from config.celery import app

app.conf.beat_schedule = {"runs-sweep-stuck": app.conf.beat_schedule["runs-sweep-stuck"]}


@worker_process_init.connect
def _install_poison(**_):
    poison, once = os.environ.get("FAULTS_POISON_FILE"), os.environ.get("FAULTS_KILL_ONCE_FILE")
    if not poison and not once:
        return
    from apps.runs import worker
    from apps.runs.engine import loop

    real_advance, real_step, steps = worker.advance, loop.step, Counter()

    def advance(store, *args, **kwargs):
        if poison and os.path.exists(poison) and store.run_id in Path(poison).read_text().split():
            with open(poison + ".kills", "a") as kills:
                kills.write(f"{store.run_id} {os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        steps[store.run_id] = 0
        return real_advance(store, *args, **kwargs)

    def step(store, *args, **kwargs):
        steps[store.run_id] += 1
        if once and _take_off(Path(once), f"{store.run_id} {steps[store.run_id]}"):
            with open(once + ".kills", "a") as kills:
                kills.write(f"{store.run_id} {os.getpid()} {time.time()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return real_step(store, *args, **kwargs)

    worker.advance, loop.step = advance, step


def _take_off(listed: Path, line: str) -> bool:
    """Whether `line` was in the file; it is not any more."""
    if not listed.exists():
        return False
    lines = listed.read_text().splitlines()
    if line not in lines:
        return False
    listed.write_text("".join(f"{other}\n" for other in lines if other != line))
    return True
