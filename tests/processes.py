"""Real Airlock processes for tests: the ASGI web server and a Celery worker, on the test database."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database pytest-django created, for child processes."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """This session's database and Redis (none when it has none); `extra` wins (REDIS_URL="": embedded)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test", "DATABASE_URL": test_database_url(),
           "PYTHONUNBUFFERED": "1"}
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    else:
        env.pop("REDIS_URL", None)
    return {**env, **extra}


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s:\n{log.read_text()[-3000:]}")


def wait_for_text(log: Path, text: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"{text!r} not seen after {timeout}s:\n{log.read_text()[-3000:]}")


class RedisServer:
    """A redis-server of our own on a fixed free port, without persistence (a restart loses every queued message,
    the hardest case for recovery). Also for a count that must be of one process's connections only: the
    session's Redis serves every session on the machine."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port, self.proc = folder, free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = self.folder / f"redis-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--logfile", str(log)], start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log.touch()
        wait_for_port(self.port, self.proc, log, timeout=15)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # with --save "": exits without writing anything
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """Stops a process we started with a session of its own, and what is left of its group (a worker's pool
    children, orphaned when a test killed the main process).

    A pid is reused once its process is reaped: on a long run (pid_max 32,768 here) a number this group held
    may soon belong to a stranger, such as a Postgres backend, which leads a group of its own. So the group is
    signalled only while its leader is unreaped (alive or a zombie: its pid, hence the group's id, is still ours);
    once reaped, only the members still in its group are, never the number itself."""
    leader = _leader(proc)
    if leader == "running":
        os.kill(proc.pid, sig)
        leader = _leader(proc, wait=timeout)
    if leader != "reaped":  # alive or a zombie: its pid, so the group's id, is still ours
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group (orphans of a killed main process)
    else:
        for pid in group_members(proc.pid):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def _leader(proc: subprocess.Popen, wait: float = 0.0) -> str:
    """`running`, `exited` (a zombie not reaped yet) or `reaped`, waiting up to `wait` seconds for a running
    leader to exit. It never reaps (waitid with WNOWAIT): `exited` keeps the pid ours until `proc.wait()`."""
    if proc.returncode is not None:
        return "reaped"
    deadline = time.monotonic() + wait
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return "exited"
        except ChildProcessError:  # reaped by someone else
            return "reaped"
        if time.monotonic() >= deadline:
            return "running"
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """The live processes in group `pgid` other than one numbered `pgid` (after its leader was reaped, a
    process with that number is a stranger). Linux /proc; [] elsewhere."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and int(entry.name) != pgid and fields[0] != "Z":  # [2]: process group
            members.append(int(entry.name))
    return members


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def web_server(log_dir: Path, **env: str):
    port = free_port()
    log = log_dir / f"web-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port),
             "--no-access-log"],
            cwd=ROOT, env=child_env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextmanager
def celery_worker(log_dir: Path, *, concurrency: int = 2, **env: str):
    """A Celery worker on this session's database and broker; its node name is `proc.node`."""
    log = log_dir / f"worker-{time.monotonic_ns()}.log"
    node = f"test-{time.monotonic_ns()}@{socket.gethostname()}"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "config.worker", "-l", "info", "--concurrency", str(concurrency),
             "--without-mingle", "--without-gossip", "-n", node],
            cwd=ROOT, env=child_env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    proc.node = node
    try:
        wait_for_text(log, "ready.", proc, timeout=60)
        yield proc
    finally:
        stop(proc, timeout=15)


def run_async(coroutine):
    """Run a coroutine to completion on a fresh loop in its own thread: Playwright's sync API
    keeps an event loop running in the test thread once browser tests have run."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@contextmanager
def gateway_server(log_dir: Path, port: int | None = None, **env: str):
    """`uvicorn config.gateway:app` (the MCP gateway, endpoint /mcp) on `port` or a free one; yields (url, process)."""
    port = port or free_port()
    log = log_dir / f"gateway-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.gateway:app", "--host", "127.0.0.1", "--port", str(port),
             "--no-access-log"],
            cwd=ROOT, env=child_env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        stop(proc, timeout=15)
