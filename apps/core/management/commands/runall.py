"""Run web + worker + beat + the MCP gateway together: the laptop way to start Airlock.

Each child gets its own process group, so Ctrl-C reaches only this launcher, which then sends
one SIGTERM to each child (a Celery worker finishes or requeues its task), waits a grace
period and kills what is left. Children die with the launcher (PR_SET_PDEATHSIG), so a killed
launcher leaves no orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 10


def _child_setup() -> None:
    os.setpgrp()
    # Not on Linux: the launcher's own signal handling still stops the children.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def processes(*, host: str, port: int, gateway_port: int, concurrency: int) -> dict[str, list[str]]:
    """The four processes, by name. The one worker takes every queue (a resume too)."""
    python = sys.executable
    return {
        "web": [python, "-m", "uvicorn", "config.asgi:application", "--host", host, "--port", str(port),
                "--no-access-log"],
        "worker": [python, "-m", "config.worker", "-l", "info", "--concurrency", str(concurrency)],
        "beat": [python, "-m", "celery", "-A", "config", "beat", "-l", "info",
                 "-s", settings.CELERY_BEAT_SCHEDULE_FILENAME],
        "gateway": [python, "-m", "uvicorn", "config.gateway:app", "--host", host, "--port", str(gateway_port),
                    "--no-access-log"],
    }


class Command(BaseCommand):
    help = ("Start the web server, a Celery worker, Celery beat and the MCP gateway together; "
            "Ctrl-C stops them all.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--gateway-port", type=int, default=8001, help="the MCP gateway (endpoint /mcp)")
        parser.add_argument("--concurrency", type=int, default=2)

    def handle(self, *args, host, port, gateway_port, concurrency, **options):
        commands = processes(host=host, port=port, gateway_port=gateway_port, concurrency=concurrency)
        # One metrics directory for the four processes, emptied now that none of them runs (apps/core/metrics.py).
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.VAR_DIR / "metrics"))
        call_command("reset_metrics", stdout=self.stdout)
        children = {name: subprocess.Popen(argv, preexec_fn=_child_setup) for name, argv in commands.items()}
        self.stdout.write(self.style.SUCCESS(f"Airlock is starting on http://{host}:{port}/ (Ctrl-C stops it)"))
        self.stdout.write(f"MCP gateway for outside hosts: http://{host}:{gateway_port}/mcp "
                          "(keys: Settings → MCP gateway)")
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping:
            dead = [name for name, proc in children.items() if proc.poll() is not None]
            if dead:
                self.stderr.write(f"{', '.join(dead)} exited; stopping the others.")
                break
            time.sleep(0.5)
        self._stop(children)

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for name, proc in children.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in {GRACE_SECONDS}s; killing it.")
                os.killpg(proc.pid, signal.SIGKILL)
        self.stdout.write("Airlock stopped.")
