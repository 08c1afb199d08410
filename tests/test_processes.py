"""How tests stop the processes they start: the whole group, and never a stranger that was given a number the group
held once (pids are reused soon on a long run; a Postgres backend leads a group of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.processes import group_members, stop_group

# A leader that starts a child in its group, says the child's pid, and waits.
LEADER = "import subprocess, sys, time; c = subprocess.Popen(['sleep', '60']); print(c.pid, flush=True); time.sleep(60)"


def start_leader() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    return proc, int(proc.stdout.readline())


def gone(pid: int, timeout: float = 10) -> bool:
    """Whether `pid` is dead (gone, or a zombie its new parent has not reaped yet) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_live_leader_and_its_group_are_stopped():
    proc, child = start_leader()
    try:
        assert group_members(proc.pid) == [child]  # the members, never the number of the group itself
        stop_group(proc, timeout=5)
        assert proc.returncode == -signal.SIGTERM
        assert gone(child)
    finally:
        proc.kill()


def test_the_orphans_of_a_reaped_leader_are_stopped_by_membership_not_by_its_number():
    proc, child = start_leader()
    try:
        os.kill(proc.pid, signal.SIGKILL)  # the main process dies alone; a test reaps it (poll, wait)
        proc.wait(10)
        assert group_members(proc.pid) == [child]  # an orphan keeps the group, and is found by it
        stop_group(proc, timeout=5)
        assert gone(child)
    finally:
        proc.kill()


def test_a_leader_reaped_behind_popens_back_is_never_signalled_by_its_number():
    proc, child = start_leader()
    try:
        os.kill(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)  # reaped by someone else: Popen does not know, and the number is free for reuse
        assert proc.returncode is None
        stop_group(proc, timeout=5)  # by membership only: the orphan goes
        assert gone(child)
    finally:
        proc.kill()
