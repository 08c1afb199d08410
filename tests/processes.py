"""Real Airlock processes for tests: the ASGI web server and a Celery worker, on the test database."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
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
