"""Measurements that need real processes (imported by bench/run.py after Django is set up on the bench database):

- `events(...)`: worker commit -> websocket frame at a client of a real uvicorn web process (`config.asgi`, the
  run page's consumer), against the floor: a bare `group_send` -> frame through bench/floor_asgi.py on the same
  channel layer. This process plays the worker (the same `append_event` in a transaction a worker's step runs);
  the client runs on its own thread and loop. Also a 500-event burst (complete and in order?) and the cost of
  `apps.core.realtime.publish` on the publishing thread.
- `memory(...)`: resident memory of the worker process that runs the engine after 100 runs and after 1,000.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

# The run page's socket adds new events on top of its event list in a frame that starts so (web/runs/_new_events.html).
NEW_EVENTS = '<div hx-swap-oob="afterbegin:#run-event-list">'
EVENT_SEQ = re.compile(r'data-seq="(\d+)"')
EVENT = re.compile(r'data-seq="(\d+)" data-at="([^"]*)">#\d+ (\S+)')

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "var" / "bench" / "logs"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, interval: float = 0.002):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


@contextmanager
def process(name: str, argv: list[str], ready: str | None = None, port: int | None = None):
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def up():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{log.read_text()[-3000:]}")
            if port is not None:
                import socket

                with socket.socket() as s:
                    return s.connect_ex(("127.0.0.1", port)) == 0
            return ready in log.read_text(errors="replace")

        _wait(up, 90, f"{name} to start", interval=0.1)
        yield proc
    finally:
        if proc.poll() is None:
            import signal

            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def uvicorn(app: str):
    return uvicorn_app(app, f"uvicorn-{app.split(':')[0]}")


def uvicorn_app(app: str, name: str):
    port = _free_port()
    return port, process(name, [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                                "--no-access-log", "--log-level", "warning"], port=port)


def worker_argv(name: str, *, concurrency: int) -> list[str]:
    """A Celery worker on every queue (config.celery.WORKER_QUEUES), as `runall` starts one (config/worker.py)."""
    return [sys.executable, "-m", "config.worker", "--concurrency", str(concurrency), "--without-mingle",
            "--without-gossip", "-l", "info", "-n", f"{name}@%h"]


def celery_worker():
    return process("worker", worker_argv(f"bench-{os.getpid()}", concurrency=1), ready="ready.")


# --- the websocket client ----------------------------------------------------------------------------

class Client:
    """A websocket client on its own thread: records (seq, perf_counter) of every JSON frame carrying a seq."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.frames: list[tuple[int, float]] = []
        self.connected = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),), daemon=True)
        self._stop: asyncio.Event | None = None

    async def _main(self) -> None:
        import websockets

        self._stop = asyncio.Event()
        async with websockets.connect(self.url, additional_headers=self.headers, max_size=None) as ws:
            self.connected.set()
            reader = asyncio.ensure_future(self._read(ws))
            await self._stop.wait()
            reader.cancel()

    async def _read(self, ws) -> None:
        async for frame in ws:
            now = time.perf_counter()
            if isinstance(frame, str) and frame.startswith(NEW_EVENTS):  # the run page: events added on top
                self.frames += [(int(seq), now) for seq in EVENT_SEQ.findall(frame)[::-1]]
            elif isinstance(frame, str) and frame.startswith("{"):  # the floor's consumer (and older trees)
                try:
                    seq = json.loads(frame).get("seq")
                except ValueError:
                    continue
                if isinstance(seq, int):
                    self.frames.append((seq, now))

    def __enter__(self) -> Client:
        self.thread.start()
        if not self.connected.wait(15):
            raise RuntimeError(f"could not connect to {self.url}")
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    def wait_for(self, seq: int, timeout: float = 10) -> float:
        def seen():
            return next((t for s, t in reversed(self.frames) if s == seq), None)
        return _wait(seen, timeout, f"frame {seq}", interval=0.0005)


def _session_cookie(user_id: int) -> str:
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.get(id=user_id)
    session = SessionStore()
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def _quiet_run(setup) -> str:
    """A run to append events to (queued, never executed: nothing else writes its events)."""
    from apps.runs import services
    from bench.engine import actor_for

    return str(services.start_run(actor=actor_for(setup), crew_id=setup.crews[min(setup.crews)], inputs={},
                                  enqueue=False).id)


def events(setup, *, samples: int, burst: int) -> dict:
    from channels.layers import get_channel_layer
    from django.conf import settings
    from django.db import transaction

    from apps.core import realtime
    from apps.runs.ledger import append_event
    from apps.runs.models import Run

    layer = get_channel_layer()
    out: dict = {"layer": settings.CHANNEL_LAYERS["default"]["BACKEND"]}
    # floor: group_send -> frame through a bare consumer
    # Sent from one event loop kept running, as a process's sender thread sends: the pub/sub layer keeps its
    # connections per loop, and `async_to_sync` would give every send a new loop and a new connection.
    sender = asyncio.new_event_loop()
    threading.Thread(target=sender.run_forever, daemon=True).start()
    port, server = uvicorn("bench.floor_asgi:application")
    with server, Client(f"ws://127.0.0.1:{port}/ws/floor/", {"Origin": f"http://127.0.0.1:{port}"}) as client:
        time.sleep(0.3)
        floor = []
        for seq in range(1, samples + 11):
            started = time.perf_counter()
            asyncio.run_coroutine_threadsafe(layer.group_send("bench.floor", {
                "type": "realtime.event", "event": "floor", "data": {"seq": seq}}), sender).result()
            arrived = client.wait_for(seq)
            if seq > 10:
                floor.append((arrived - started) * 1000)
            time.sleep(0.01)
    sender.call_soon_threadsafe(sender.stop)
    out["floor_ms"] = floor
    # the publishing thread's cost: apps.core.realtime.publish (hand-off to the sender thread)
    cost = []
    for n in range(samples * 5):
        started = time.perf_counter()
        realtime.publish("bench.nobody", "run.event", run_id="x", seq=n, type="bench")
        cost.append((time.perf_counter() - started) * 1000)
    getattr(realtime, "flush", lambda: None)()  # older trees publish synchronously
    out["publish_ms"] = cost
    # ours: commit -> frame at the run page's consumer in the real web process
    run_id = _quiet_run(setup)
    cookie = _session_cookie(setup.user_id)
    port, server = uvicorn("config.asgi:application")
    with server, Client(f"ws://127.0.0.1:{port}/ws/run/{run_id}/",
                        {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={cookie}"}) as client:
        time.sleep(0.3)
        ours = []
        for index in range(samples + 10):
            committed: list[float] = []
            with transaction.atomic():
                transaction.on_commit(lambda committed=committed: committed.append(time.perf_counter()))
                event = append_event(run_id, "bench.tick", n=index)
            arrived = client.wait_for(event.seq)
            if index >= 10:
                ours.append((arrived - committed[0]) * 1000)
            time.sleep(0.02)
        out["event_ms"] = ours
        # a burst: `burst` events, each its own transaction, as fast as one worker thread can commit them
        first = Run.objects.get(id=run_id).last_seq + 1
        started = time.perf_counter()
        for index in range(burst):
            append_event(run_id, "bench.burst", n=index)
        written = time.perf_counter() - started
        last = first + burst - 1
        with suppress(TimeoutError):
            client.wait_for(last, timeout=60)
        time.sleep(0.5)
        got = [s for s, _ in client.frames if first <= s <= last]
        out["burst"] = {"events": burst, "received": len(set(got)), "in_order": got == sorted(got),
                        "duplicates": len(got) - len(set(got)), "write_s": round(written, 3),
                        "complete": sorted(set(got)) == list(range(first, last + 1))}
    return out


# --- memory on a real worker ----------------------------------------------------------------

def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def memory(setup, worker, *, checkpoints: list[int]) -> dict:
    from apps.runs import services
    from apps.runs.models import Run
    from bench.engine import actor_for

    actor = actor_for(setup)
    crew = setup.crews[min(setup.crews)]
    done, samples = 0, []
    for target in checkpoints:
        batch = []
        while done < target:
            batch.append(services.start_run(actor=actor, crew_id=crew, inputs={}).id)
            done += 1
            if len(batch) >= 50 or done == target:
                _wait(lambda batch=batch: Run.objects.filter(id__in=batch, status="succeeded").count() == len(batch),
                      600, "a batch of runs", interval=0.2)
                failed = Run.objects.filter(id__in=batch).exclude(status="succeeded").count()
                assert not failed, f"{failed} runs did not succeed"
                batch = []
        children = _children(worker.pid)
        samples.append({"runs": done, "main_mb": round(_rss_mb(worker.pid), 1),
                        "child_mb": round(max((_rss_mb(c) for c in children), default=0.0), 1)})
    return {"samples": samples, "steps_per_run": min(setup.crews)}
