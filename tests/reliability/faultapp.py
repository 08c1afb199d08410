"""The Celery app of the fault tests' workers and beat (`celery -A tests.reliability.faultapp`):
Airlock's own app, with

- beat sweeping stuck runs every FAULTS_SWEEP_S seconds (30 s in production) and nothing else;
- a poison switch: a run whose id is listed in the file FAULTS_POISON_FILE kills the pool process
  that claimed it (SIGKILL, right after the claim), every time it is delivered. Each kill is
  appended to FAULTS_POISON_FILE + ".kills".
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from celery.signals import worker_process_init

from config.celery import app

app.conf.beat_schedule = {
    "runs-sweep-stuck": {"task": "apps.runs.tasks.sweep_stuck_runs",
                         "schedule": float(os.environ.get("FAULTS_SWEEP_S", "1"))},
}


@worker_process_init.connect
def _install_poison(**_):
    poison = os.environ.get("FAULTS_POISON_FILE")
    if not poison:
        return
    from apps.runs import services

    real_advance = services.advance

    def advance(store, *args, **kwargs):
        if os.path.exists(poison) and store.run_id in Path(poison).read_text().split():
            with open(poison + ".kills", "a") as kills:
                kills.write(f"{store.run_id} {os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return real_advance(store, *args, **kwargs)

    services.advance = advance
