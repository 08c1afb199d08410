"""Two Celery beats against one Redis (or one var directory): only one sends the schedule; the other
takes over when the first stops, and the health check tells a ticking beat from a stopped one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def start_beat(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info", "-s", str(tmp_path / f"{name}.db"),
         "--max-interval", "1"],
        cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        # The sweep's "Sending due task" lines are how this test sees which beat sends.
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test", "AIRLOCK_LOG_SWEEPS": "1"})
    return proc, log


def wait_for(log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log.name}:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_second_beat_waits_and_takes_over_when_the_first_stops(tmp_path):
    first, first_log = start_beat(tmp_path, "first")
    try:
        wait_for(first_log, "This beat holds the beat lock")
        second, second_log = start_beat(tmp_path, "second")
        try:
            wait_for(second_log, "Another Celery beat holds the beat lock")
            time.sleep(2)
            assert "This beat holds the beat lock" not in second_log.read_text()
            assert "Sending due task" not in second_log.read_text()  # the waiting beat sends nothing
            stop(first)
            wait_for(second_log, "This beat holds the beat lock", timeout=30)  # handed over on a clean stop
            wait_for(second_log, "Sending due task", timeout=30)
        finally:
            stop(second)
    finally:
        stop(first)


def test_the_beat_health_check_fails_without_a_ticking_beat(tmp_path):
    def health() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", "beat_health"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test"})

    tick = Path(settings.VAR_DIR) / f"beat-tick-{os.uname().nodename}"
    tick.unlink(missing_ok=True)
    refused = health()
    assert refused.returncode != 0 and "no beat has started" in refused.stderr
    beat, log = start_beat(tmp_path, "healthy")
    try:
        wait_for(log, "This beat holds the beat lock")
        assert health().returncode == 0
    finally:
        stop(beat)
    tick.write_text(str(time.time() - 600))  # a beat whose renew loop died ten minutes ago
    stale = health()
    assert stale.returncode != 0 and "last tick was" in stale.stderr


pytestmark = pytest.mark.timeout(180)
