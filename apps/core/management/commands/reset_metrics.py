"""Empties PROMETHEUS_MULTIPROC_DIR: run once when the whole stack starts (compose's `migrate` does).

prometheus-client's multiprocess files must not outlive the processes of an earlier start: a counter
would carry a dead process's values into the new stack's sums forever.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Empty the Prometheus multiprocess directory (only when every Airlock process is stopped or starting)."

    def handle(self, *args, **options) -> None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
        if not directory:
            self.stdout.write("PROMETHEUS_MULTIPROC_DIR is not set: nothing to reset.")
            return
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        removed = 0
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
            removed += 1
        self.stdout.write(f"Metrics directory {path} ready ({removed} file(s) from an earlier start removed).")
