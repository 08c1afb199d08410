"""Airlock under load, on loopback, against a stack it starts itself like docker-compose.yml's: two web processes
(uvicorn: HTTP API and websockets; clients take turns between them, as behind a load balancer), two Celery workers
(--concurrency 4 each, the compose file's) and beat, on a database and a Redis database of its own.

    .venv/bin/python bench/load.py [--runs 200] [--storm 500] [--clients 100] [--threads 16]
                                   [--web 2] [--workers 2] [--concurrency 4]

0. Warm-up (not measured): `--warm` short runs (default two per worker child), so every child has its MCP session
   open and its code loaded, as in a deployment that has been up a while.
1. Concurrent runs: `--runs` runs of a short crew (the scripted model, one read of the bundled order desk over
   stdio MCP, then an answer), all started at once through the API (POST /crews/{id}/runs from a thread pool).
   `--clients` websocket clients sit on run pages (/ws/run/{id}/), connected before their runs leave the queue
   (half the other runs are started ahead of them), so they see every event arrive live.
2. Approval storm: `--storm` runs whose one tool call (a refund on the order desk, granted `approve`) waits for
   a person; once all wait, every pending approval is decided through the API (POST /approvals/{id}/decision
   with an approver's token) from a thread pool, all at once.

It prints one table: the figures with targets (run start p95, decision p95, decided -> dispatched p95, event ->
websocket frame p95, errors, lost), then throughput (runs/s, decisions/s), p50s, where the time went (the deepest
each broker queue got, the statements that waited for a lock, the CPU each role spent per approval), and the
"nothing lost" checks: every run ended as expected (succeeded, or waiting before the storm's decisions), every
approved refund ran exactly once by the
ledger (one `succeeded` ToolCall, one attempt) and by the order desk's own store (one refund per request id, none
repeated, the order's refunded total matching), and every websocket client saw every event of its run, in order,
without duplicates. Results: bench/results/load-<ts>.json.

A database `airlock_bench_load_<pid>_<time>` on DATABASE_URL's server and an empty Redis database of REDIS_URL's
server, both made for the run and removed after it (bench/scratch.py), the order desk's store under var/bench/.
Not part of the test suite. docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.live import _wait  # noqa: E402
from bench.run import RESULTS  # noqa: E402
from bench.stats import quantile  # noqa: E402

DESK_DATA = ROOT / "var" / "bench" / "load-orders.json"
STORM_ORDER = "A-1003"  # total 12,500 cents: room for 500 refunds of 1 cent (and more)
RETRIES: list[str] = []  # requests sent again after a reset of their kept-alive connection
TERMINAL = ("succeeded", "failed", "cancelled", "timed_out", "limit_exceeded")
# p95 targets (ms) and what they measure; errors and lost must be 0
TARGETS = {"start": 500, "decision": 300, "dispatch": 2000, "frame": 500}


# --- environment -----------------------------------------------------------------------------------------

def configure(db_url: str, redis_url: str) -> None:
    """Settings for this process and the ones it starts (production-like), on the scratch database and Redis db."""
    from cryptography.fernet import Fernet

    os.environ.update({
        "DATABASE_URL": db_url, "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0", "SECRET_KEY": "bench-load-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "0",
        "AIRLOCK_CHANNEL_PREFIX": f"airlock-load-{os.getpid()}", "AIRLOCK_EGRESS_ALLOW_PRIVATE": "1",
    })
    os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", Fernet.generate_key().decode())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.chdir(ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    DESK_DATA.parent.mkdir(parents=True, exist_ok=True)
    for path in (DESK_DATA, DESK_DATA.with_suffix(".lock")):
        path.unlink(missing_ok=True)


def setup() -> dict:
    """An org, the order desk over stdio, the short crew and the held-refund crew, tokens, a session."""
    from apps.accounts import services as accounts
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.approvals.definition_changes import inbox
    from apps.crews import services as crews
    from apps.registry import services as registry
    from bench.live import _session_cookie

    user = accounts.ensure_user(email="load@example.com", password="load-password-123")
    org, _, _ = accounts.create_organization(name="Load", owner_email=user.email)
    owner = Membership.objects.select_related("user", "org").get(org=org, role="owner")
    actor = member_actor(owner)
    server = registry.create_server(actor=actor, name="orders", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "apps.demo.order_desk", "stdio"],
                                    cwd=str(ROOT), env={"ORDER_DESK_DATA": str(DESK_DATA)}, sync=False)
    report = registry.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
    reader = agents.create_agent(
        actor=actor, name="Reader", connection_id=connection.id,
        script=[{"call": [{"tool": "orders.get_order_status", "args": {"order_id": "{{input.order_id}}"}}]},
                {"say": "Looked it up.\nSTATUS: done\nREASON: one read"}],
        grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    refunder = agents.create_agent(
        actor=actor, name="Refunder", connection_id=connection.id,
        script=[{"call": [{"tool": "orders.refund_order", "args": {
            "order_id": STORM_ORDER, "amount_cents": 1, "request_id": "load-{{input.order_id}}"}}]},
                {"say": "Refunded.\nSTATUS: done\nREASON: approved"}],
        grants=[{"tool": "orders.refund_order", "policy": "approve"}])
    inputs = [{"name": "order_id", "type": "string", "required": True}]
    short = crews.create_crew(actor=actor, name="Short", process="sequential", inputs=inputs,
                              tasks=[{"name": "look", "agent_id": reader.id, "description": "Look up {order_id}."}])
    held = crews.create_crew(actor=actor, name="Held refund", process="sequential", inputs=inputs,
                             tasks=[{"name": "refund", "agent_id": refunder.id, "description": "Refund {order_id}."}])
    _, starter = accounts.create_api_token(actor=None, org_id=org.id, name="load starter", role="builder")
    _, approver = accounts.create_api_token(actor=None, org_id=org.id, name="load approver", role="approver")
    return {"org_id": str(org.id), "short": str(short.id), "held": str(held.id), "starter": starter,
            "approver": approver, "cookie": _session_cookie(user.id)}


def worker_process(index: int, concurrency: int):
    from bench.live import process, worker_argv

    return process(f"load-worker-{index}", worker_argv(f"load-{os.getpid()}-{index}", concurrency=concurrency),
                   ready="ready.")


def beat_process():
    """Beat, as in production: its sweeper re-enqueues a run whose task failed or whose worker died."""
    from bench.live import process

    schedule = ROOT / "var" / "bench" / "load-beat-schedule"
    schedule.unlink(missing_ok=True)
    return process("load-beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info", "-s",
                                 str(schedule)], ready="beat: Starting")


class Sampler(threading.Thread):
    """Twice a second: the peak connections of this stack's database and the server's (pg_stat_activity), how many
    of this stack's sessions wait for a lock (and in which statement), and how many messages
    wait in each broker queue (LLEN) and are taken but unacknowledged (the `unacked` hash)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.ours = self.server = 0
        self.queues: dict[str, int] = {}  # deepest seen
        self.lock_waits: dict[str, int] = {}  # statement -> samples x sessions waiting for a lock in it
        self.samples: list[tuple[float, dict[str, int]]] = []

    def run(self) -> None:
        import psycopg
        import redis

        from config.celery import WORKER_QUEUES

        db = urlparse(os.environ["DATABASE_URL"]).path.lstrip("/")
        url = os.environ["DATABASE_URL"]
        broker = redis.Redis.from_url(os.environ["REDIS_URL"])
        names = WORKER_QUEUES.split(",")
        with psycopg.connect(url, autocommit=True) as conn:
            while not self.stop.wait(0.5):
                rows = dict(conn.execute("SELECT coalesce(datname, ''), count(*) FROM pg_stat_activity "
                                         "GROUP BY 1").fetchall())
                self.ours = max(self.ours, rows.get(db, 0))
                self.server = max(self.server, sum(rows.values()))
                depth = {name: broker.llen(name) for name in names} | {"unacked": broker.hlen("unacked")}
                waits = conn.execute(LOCK_WAITS_SQL, (db,)).fetchall()
                for statement, count in waits:
                    self.lock_waits[statement] = self.lock_waits.get(statement, 0) + count
                self.samples.append((time.time(), {**depth, "lock_waits": sum(count for _, count in waits)}))
                for name, count in depth.items():
                    self.queues[name] = max(self.queues.get(name, 0), count)


# the statements of this stack's sessions that wait for a lock, by their first words
LOCK_WAITS_SQL = """
SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90), count(*) FROM pg_stat_activity
WHERE datname = %s AND wait_event_type = 'Lock' GROUP BY 1
"""


def worker_errors() -> list[str]:
    errors = []
    for log in (ROOT / "var" / "bench" / "logs").glob("load-worker-*.log"):
        errors += [line for line in log.read_text(errors="replace").splitlines() if "raised unexpected" in line]
    return errors


class CpuByRole:
    """The CPU time this stack's processes spent between `start()` and `stop()`, by role, from /proc (Linux): each
    process the bench started and everything under it (a worker's children, their MCP servers), the order desk's
    servers apart, and the Postgres backends of this stack's database. What an approval costs the machine, where
    a per-stage latency cannot show it: on two shared cores every process takes its turn at the same CPUs."""

    def __init__(self, roles: dict[int, str]) -> None:
        self.roles = roles  # session id (the pid of a process started with a session of its own) -> role
        self.before: dict[int, tuple[str, int]] = {}

    def _sample(self) -> dict[int, tuple[str, int]]:
        import psycopg

        db = urlparse(os.environ["DATABASE_URL"]).path.lstrip("/")
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            backends = {pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                                                       "AND pid <> pg_backend_pid()", (db,))}
        procs = {}  # pid -> (parent, session, command line, CPU ticks)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    procs[int(entry.name)] = (int(fields[1]), int(fields[3]), (entry / "cmdline").read_bytes(),
                                              int(fields[11]) + int(fields[12]))
                except OSError:
                    continue

        def role(pid: int, depth: int = 0) -> str | None:
            # a stdio MCP server may run in a session of its own: it belongs to whoever started it
            parent, session, _, _ = procs.get(pid, (0, 0, b"", 0))
            return self.roles.get(session) or (role(parent, depth + 1) if parent and depth < 4 else None)

        ticks = {}
        for pid, (_, _, cmdline, spent) in procs.items():
            name = "postgres" if pid in backends else role(pid)
            if name is not None:
                ticks[pid] = ("order desk (MCP server)" if b"apps.demo.order_desk" in cmdline else name, spent)
        return ticks

    def start(self) -> None:
        self.before = self._sample()

    def stop(self, per: int) -> dict[str, float]:
        """CPU ms per `per` (e.g. per approval) by role."""
        after, hz, spent = self._sample(), os.sysconf("SC_CLK_TCK"), {}
        for pid, (role, ticks) in after.items():
            spent[role] = spent.get(role, 0) + ticks - self.before.get(pid, (role, 0))[1]
        return {role: round(1000 * t / hz / max(per, 1), 1) for role, t in sorted(spent.items(), key=lambda kv: -kv[1])}


def web_process(index: int):
    from bench.live import uvicorn_app

    return uvicorn_app("config.asgi:application", f"load-web-{index}")


# --- helpers ---------------------------------------------------------------------------------------------

def ms(values: list[float]) -> tuple[float, float]:
    return (round(statistics.median(values), 1), round(quantile(values, 0.95), 1)) if values else (float("nan"),) * 2


def timed_requests(method: str, urls_and_bodies: list[tuple[str, dict]], token: str, threads: int,
                   ok: int) -> tuple[list, list[float], list[str], float]:
    """Sends every request from a pool of `threads` (one keep-alive session each); (answers, latencies ms,
    errors, wall seconds). As a browser does, a request whose kept-alive connection the server had just closed
    (a reset before any answer) is sent once more, with the same `Idempotency-Key` (a run is started once; a
    decision made twice is a 409, which then counts as the decision); RETRIES counts them."""
    import requests

    local = threading.local()

    def send(item):
        url, body = item
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
            session.headers["Authorization"] = f"Bearer {token}"
        started = time.perf_counter()
        headers, accepted = {"Idempotency-Key": uuid.uuid4().hex}, {ok}
        try:
            try:
                response = session.request(method, url, json=body, headers=headers, timeout=120)
            except requests.ConnectionError:
                RETRIES.append(url)
                accepted.add(409)
                response = session.request(method, url, json=body, headers=headers, timeout=120)
        except requests.RequestException as exc:
            return None, (time.perf_counter() - started) * 1000, f"{type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code not in accepted:
            return None, elapsed, f"HTTP {response.status_code}: {response.text[:200]}"
        return response.json(), elapsed, None

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(send, urls_and_bodies))
    wall = time.perf_counter() - started
    return ([r[0] for r in results], [r[1] for r in results], [r[2] for r in results if r[2]], wall)


def wait_until(what: str, predicate, timeout: float, interval: float = 0.5):
    return _wait(predicate, timeout, what, interval=interval)


class Watchers:
    """`n` websocket clients, one per run page, in a process of their own (bench/watchers.py): on a thread of
    this one they waited for the HTTP threads' GIL before they timed a frame. Each records (seq, type, arrival
    wall time, event time) of every JSON event frame, as the child reports them."""

    def __init__(self, bases: list[str], cookie: str, run_ids: list[str]) -> None:
        self.bases, self.cookie, self.run_ids = bases, cookie, run_ids
        self.frames: dict[str, list[tuple[int, str, float, float]]] = {r: [] for r in run_ids}
        # every frame of each socket, in short (arrival, kind, the seqs it names): what a lost event's socket got
        self.log: dict[str, list[tuple[float, str, list[int]]]] = {r: [] for r in run_ids}
        self.opened_at: dict[str, float] = {}
        self.errors: list[str] = []
        self.connected = threading.Event()
        self.child: subprocess.Popen | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        assert self.child is not None and self.child.stdout is not None
        for line in self.child.stdout:
            said = json.loads(line)
            if "frame" in said:
                run_id, at = said["frame"], said["at"]
                self.log[run_id].append((at, said["kind"], said["seqs"]))
                self.frames[run_id] += [(seq, type_, at, sent) for seq, type_, sent in said["events"]]
            elif "opened" in said:
                self.opened_at[said["opened"]] = said["at"]
            elif "error" in said:
                self.errors.append(said["error"])
            elif "connected" in said:
                self.connected.set()
        self.connected.set()  # the child is gone: whoever waits must not wait for it

    def __enter__(self) -> Watchers:
        self.child = subprocess.Popen([sys.executable, "-m", "bench.watchers"], cwd=ROOT, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps({"bases": self.bases, "cookie": self.cookie, "run_ids": self.run_ids})
                               + "\n")
        self.child.stdin.flush()
        self.reader.start()
        if not self.connected.wait(120) or self.child.poll() is not None:
            raise RuntimeError("websocket clients did not connect")
        return self

    def __exit__(self, *exc) -> None:
        assert self.child is not None and self.child.stdin is not None
        self.child.stdin.close()  # the child stops its clients and exits
        try:
            self.child.wait(30)
        except subprocess.TimeoutExpired:
            self.child.kill()
        self.reader.join(30)


# --- the phases ------------------------------------------------------------------------------------------

def warm_up(bases: list[str], s: dict, runs: int, threads: int) -> float:
    """`runs` short runs, not measured: a deployed worker's children have their MCP sessions open and their code
    loaded; a fresh one pays ~1 s per child to start the order desk's process. Returns the seconds it took."""
    from apps.runs.models import Run

    started = time.perf_counter()
    items = [(f"{bases[n % len(bases)]}/api/v1/crews/{s['short']}/runs", {"inputs": {"order_id": "A-1001"}})
             for n in range(runs)]
    answers, _, errors, _ = timed_requests("POST", items, s["starter"], threads, ok=201)
    if errors:
        raise RuntimeError(f"warm-up runs failed to start: {errors[:3]}")
    ids = [a["id"] for a in answers]
    wait_until("the warm-up runs", lambda: Run.objects.filter(id__in=ids, status__in=TERMINAL).count() == len(ids),
               timeout=600, interval=0.5)
    return round(time.perf_counter() - started, 1)


def concurrent_runs(bases: list[str], s: dict, runs: int, clients: int, threads: int) -> dict:
    from django.db.models import Max

    from apps.runs.models import Run, RunEvent

    orders = ["A-1001", "A-1002", "A-1003"]
    items = [(f"{bases[n % len(bases)]}/api/v1/crews/{s['short']}/runs", {"inputs": {"order_id": orders[n % 3]}})
             for n in range(runs)]
    # The run pages' clients must be there before their runs execute, to see events arrive live: half the
    # unwatched runs go first (the workers' backlog), then the `clients` watched ones, whose pages connect at
    # once, then the rest while the pages watch. All requests go out from the same pool, back to back.
    ahead = (runs - min(clients, runs)) // 2
    watched_items, rest = items[ahead:ahead + clients], items[:ahead] + items[ahead + clients:]
    answers, latencies, errors, wall = timed_requests("POST", rest[:ahead], s["starter"], threads, ok=201)
    started_at = time.time() - wall
    mine, mine_latencies, mine_errors, _ = timed_requests("POST", watched_items, s["starter"], threads, ok=201)
    watched = [a["id"] for a in mine if a]
    # each batch's own latencies: where in the phase a slow start was (the pages connect during the last one)
    by_batch = {"ahead": ms(latencies), "watched": ms(mine_latencies)}
    answers, latencies, errors = answers + mine, latencies + mine_latencies, errors + mine_errors
    with Watchers(bases, s["cookie"], watched) as watchers:
        more, more_latencies, more_errors, _ = timed_requests("POST", rest[ahead:], s["starter"], threads,
                                                              ok=201)
        by_batch["with_pages"] = ms(more_latencies)
        answers += more
        latencies += more_latencies
        errors += more_errors
        ids = [a["id"] for a in answers if a]
        wait_until("the runs to finish", lambda: Run.objects.filter(id__in=ids, status__in=TERMINAL).count()
                   == len(ids), timeout=1800, interval=1)
        finished = time.time()
        # The last frames: until every socket has its run's last event (a late one is slow, not lost), or 30 s.
        last = {str(r): n for r, n in RunEvent.objects.filter(run_id__in=watched).values_list("run_id")
                .annotate(n=Max("seq")).values_list("run_id", "n")}
        with contextlib.suppress(TimeoutError):  # what never came is counted below
            wait_until("the last frames", lambda: all(watchers.frames[r] and watchers.frames[r][-1][0] >= last[r]
                                                      for r in watched), timeout=30, interval=0.2)
        settled = time.time()
    rows = list(Run.objects.filter(id__in=ids).values("id", "status", "created_at", "started_at", "finished_at"))
    statuses = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    last_finish = max(r["finished_at"] for r in rows).timestamp()
    # websocket completeness: every event of the run, in order, no duplicates
    complete, frame_ms, frame_ages, frames = 0, [], [], 0
    expected = {str(r): list(RunEvent.objects.filter(run_id=r).order_by("seq").values_list("seq", flat=True))
                for r in watched}
    problems = []
    for run_id, got in watchers.frames.items():
        seqs = [f[0] for f in got]
        frames += len(seqs)
        if seqs == expected[run_id] and seqs:
            complete += 1
        else:
            problems.append({"run": run_id, "got": len(seqs), "expected": len(expected[run_id]),
                             "frames": [(round(at - watchers.opened_at.get(run_id, at), 3), kind, seq_list)
                                        for at, kind, seq_list in watchers.log[run_id]]})
        # live frames only: events committed after the client connected (earlier ones are replayed on connect)
        opened = watchers.opened_at.get(run_id, float("inf"))
        live = [(at - opened, (arrived - at) * 1000) for _, _, arrived, at in got if at >= opened and arrived >= at]
        frame_ms += [lag for _, lag in live]
        # when in its socket's life each live event came: a lag in the page's first second is its socket's joining
        frame_ages += [(round(age, 3), round(lag)) for age, lag in live]
    return {
        "runs": runs, "started": len(ids), "api_errors": errors[:5], "api_error_count": len(errors),
        "start_ms": ms(latencies), "start_ms_by_batch": by_batch, "statuses": statuses,
        "runs_per_s": round(len(ids) / (last_finish - started_at), 2),
        "wall_s": round(finished - started_at, 1),
        "queued_to_finished_ms": ms([(r["finished_at"] - r["created_at"]).total_seconds() * 1000 for r in rows
                                     if r["finished_at"]]),
        "started_to_finished_ms": ms([(r["finished_at"] - r["started_at"]).total_seconds() * 1000 for r in rows
                                      if r["finished_at"] and r["started_at"]]),
        "clients": len(watched), "ws_errors": watchers.errors[:5], "ws_error_count": len(watchers.errors),
        "ws_complete": complete, "ws_frames": frames, "ws_problems": problems[:5],
        "event_to_frame_ms": ms(frame_ms), "live_frames": len(frame_ms),
        "frames_settled_s": round(settled - finished, 1), "event_to_frame_samples": sorted(round(f) for f in frame_ms),
        "event_to_frame_by_socket_age": sorted(frame_ages),
    }


def approval_storm(bases: list[str], s: dict, storm: int, threads: int, cpu: CpuByRole | None = None) -> dict:
    from apps.approvals.models import ApprovalRequest
    from apps.runs.models import Run, ToolCall

    items = [(f"{bases[n % len(bases)]}/api/v1/crews/{s['held']}/runs", {"inputs": {"order_id": f"S-{n:04d}"}})
             for n in range(storm)]
    answers, start_latencies, start_errors, _ = timed_requests("POST", items, s["starter"], threads, ok=201)
    ids = [a["id"] for a in answers if a]
    t0 = time.perf_counter()
    wait_until("the storm's runs to wait", lambda: Run.objects.filter(id__in=ids).exclude(status="queued")
               .exclude(status="running").count() == len(ids), timeout=1800, interval=1)
    to_waiting_s = time.perf_counter() - t0
    waiting = Run.objects.filter(id__in=ids, status="waiting").count()
    pending = list(ApprovalRequest.objects.filter(run_id__in=ids, status="pending").values_list("id", flat=True))
    decisions = [(f"{bases[n % len(bases)]}/api/v1/approvals/{a}/decision", {"decision": "approve", "comment": "load"})
                 for n, a in enumerate(pending)]
    print(f"  {len(pending)} waiting after {to_waiting_s:.1f} s; deciding them all at once ...", flush=True)
    if cpu is not None:
        cpu.start()
    answered, latencies, errors, wall = timed_requests("POST", decisions, s["approver"], threads, ok=200)
    decided_at = time.time()
    wait_until("the approved runs to finish", lambda: Run.objects.filter(id__in=ids, status__in=TERMINAL).count()
               == len(ids), timeout=1800, interval=1)
    all_done_s = time.time() - decided_at
    # from the first decision to the last run's end: the decisions, the resumes and the runs' last steps
    cpu_ms = cpu.stop(per=len(pending)) if cpu is not None else {}
    statuses = {}
    for status in Run.objects.filter(id__in=ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    # exactly once: the ledger...
    calls = list(ToolCall.objects.filter(run_id__in=ids, qualified_name="orders.refund_order")
                 .values("run_id", "state", "attempts", "arguments", "dispatched_at", "finished_at", "approval_id"))
    succeeded = [c for c in calls if c["state"] == "succeeded"]
    decided = dict(ApprovalRequest.objects.filter(run_id__in=ids).values_list("id", "decided_at"))
    dispatch_ms = [(c["dispatched_at"] - decided[c["approval_id"]]).total_seconds() * 1000 for c in succeeded
                   if c["dispatched_at"] and decided.get(c["approval_id"])]
    # when each approved call went out against when it was decided, in decision order (every 10th): a lag that grows
    # is a backlog, a constant one is a delay before resumes start
    timeline = sorted((decided[c["approval_id"]], c["dispatched_at"]) for c in succeeded
                      if c["dispatched_at"] and decided.get(c["approval_id"]))
    first = timeline[0][0] if timeline else None
    dispatch_timeline = [(round((d - first).total_seconds(), 2), round((x - d).total_seconds(), 2))
                         for d, x in timeline[::10]]
    # the refund itself, at the order desk (its process holds the worker's child meanwhile)
    tool_ms = [(c["finished_at"] - c["dispatched_at"]).total_seconds() * 1000 for c in succeeded
               if c["finished_at"] and c["dispatched_at"]]
    # ...and the order desk's own store
    store = json.loads(DESK_DATA.read_text())
    refunds = {k: v for k, v in store["refunds"].items() if k.startswith("load-S-")}
    expected_ids = {c["arguments"]["request_id"] for c in succeeded}
    return {
        "storm": storm, "started": len(ids), "start_errors": start_errors[:5], "start_error_count": len(start_errors),
        "start_ms": ms(start_latencies), "to_waiting_s": round(to_waiting_s, 1), "waiting": waiting,
        "pending": len(pending), "decided": sum(1 for a in answered if a), "decision_errors": errors[:5],
        "decision_error_count": len(errors), "decision_ms": ms(latencies),
        "decisions_per_s": round(len(pending) / wall, 1), "decisions_wall_s": round(wall, 1),
        "decided_to_dispatched_ms": ms(dispatch_ms), "dispatch_timeline": dispatch_timeline,
        "refund_call_ms": ms(tool_ms),
        "all_finished_s": round(all_done_s, 1), "statuses": statuses, "cpu_ms_per_approval": cpu_ms,
        "ledger_calls": len(calls), "ledger_succeeded": len(succeeded),
        "ledger_one_attempt": all(c["attempts"] == 1 for c in succeeded),
        "desk_refunds": len(refunds), "desk_repeated": sum(1 for r in refunds.values() if r.get("repeated")),
        "desk_matches_ledger": set(refunds) == expected_ids,
        "desk_refunded_cents": store["orders"][STORM_ORDER]["refunded_cents"],
    }


# --- the table -------------------------------------------------------------------------------------------

def targets(r: dict) -> list[tuple[str, str, str, bool]]:
    """(figure, measured, target, met) of the figures the issue sets targets for."""
    n, a = r["runs"], r["storm"]
    errors = (n["api_error_count"] + n["ws_error_count"] + a["start_error_count"] + a["decision_error_count"]
              + r["stack"]["worker_task_errors"])
    lost = lost_count(r)

    def p95(figure: str, value: float, target: float) -> tuple[str, str, str, bool]:
        return figure, f"{value:,.0f} ms", f"<= {target:,} ms", value <= target

    return [p95("run start p95 (POST /crews/{id}/runs)", n["start_ms"][1], TARGETS["start"]),
            p95("decision p95 (POST /approvals/{id}/decision)", a["decision_ms"][1], TARGETS["decision"]),
            p95("decided -> dispatched p95", a["decided_to_dispatched_ms"][1], TARGETS["dispatch"]),
            p95("event -> websocket frame p95", n["event_to_frame_ms"][1], TARGETS["frame"]),
            ("errors (API, websockets, worker tasks)", str(errors), "0", errors == 0),
            ("lost (runs, refunds, events; below)", str(lost), "0", lost == 0)]


def lock_target(statement: str) -> str:
    """What a waiting statement waits for, in a few words: the first table it names."""
    match = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)', statement)
    return f"{statement.split()[0]} {match.group(1) if match else ''}".strip()


def lost_count(r: dict) -> int:
    """Runs not ended as expected, approved calls not run exactly once, events a client did not get."""
    n, a = r["runs"], r["storm"]
    return ((n["runs"] - n["statuses"].get("succeeded", 0)) + (n["clients"] - n["ws_complete"])
            + (a["storm"] - a["statuses"].get("succeeded", 0)) + abs(a["storm"] - a["ledger_succeeded"])
            + abs(a["storm"] - a["desk_refunds"]) + a["desk_repeated"] + (0 if a["ledger_one_attempt"] else 1))


def table(r: dict, s: dict) -> str:
    rows = []

    def add(metric, value, check=None):
        rows.append((metric, value, {True: "ok", False: "LOST", None: ""}[check]))

    n = r["runs"]
    add(f"runs: {n['runs']} started at once through the API", f"{n['started']} started, "
        f"{n['api_error_count']} errors", n["api_error_count"] == 0)
    add("runs: API start latency p50 / p95", f"{n['start_ms'][0]} / {n['start_ms'][1]} ms")
    add("runs: throughput (first start -> last finish)", f"{n['runs_per_s']} runs/s ({n['wall_s']} s)")
    add("runs: queued -> finished p50 / p95", f"{n['queued_to_finished_ms'][0] / 1000:.1f} / "
        f"{n['queued_to_finished_ms'][1] / 1000:.1f} s")
    add("runs: started -> finished p50 / p95",
        f"{n['started_to_finished_ms'][0]} / {n['started_to_finished_ms'][1]} ms")
    add("runs: all succeeded", json.dumps(n["statuses"]), n["statuses"] == {"succeeded": n["runs"]})
    add(f"websockets: {n['clients']} clients on run pages", f"{n['ws_frames']} event frames, "
        f"{n['ws_error_count']} errors", n["ws_error_count"] == 0)
    add("websockets: event committed -> live frame p50 / p95", f"{n['event_to_frame_ms'][0]} / "
        f"{n['event_to_frame_ms'][1]} ms ({n['live_frames']} live frames)")
    add("websockets: every event, in order, no duplicates", f"{n['ws_complete']}/{n['clients']} clients",
        n["ws_complete"] == n["clients"])
    a = r["storm"]
    add(f"storm: {a['storm']} held runs started through the API", f"{a['started']} started, "
        f"{a['start_error_count']} errors", a["start_error_count"] == 0)
    add("storm: all waiting for a person", f"{a['waiting']} waiting, {a['pending']} pending "
        f"({a['to_waiting_s']} s)", a["waiting"] == a["pending"] == a["storm"])
    add("storm: decisions through the API", f"{a['decisions_per_s']} decisions/s ({a['decisions_wall_s']} s)")
    add("storm: decision latency p50 / p95", f"{a['decision_ms'][0]} / {a['decision_ms'][1]} ms")
    add("storm: decision errors", str(a["decision_error_count"]), a["decision_error_count"] == 0)
    add("storm: decided -> approved call dispatched p50 / p95",
        f"{a['decided_to_dispatched_ms'][0] / 1000:.1f} / {a['decided_to_dispatched_ms'][1] / 1000:.1f} s")
    add("storm: all runs finished after the last decision", f"{a['all_finished_s']} s; {json.dumps(a['statuses'])}",
        a["statuses"] == {"succeeded": a["storm"]})
    if a.get("cpu_ms_per_approval"):
        cpu = a["cpu_ms_per_approval"]
        add("storm: CPU per approval, decision to run's end (ms)",
            f"{sum(cpu.values()):.1f}: " + ", ".join(f"{role} {ms}" for role, ms in cpu.items()))
    add("storm: ledger: each approved call ran once", f"{a['ledger_succeeded']}/{a['ledger_calls']} succeeded, "
        f"one attempt each: {a['ledger_one_attempt']}",
        a["ledger_succeeded"] == a["ledger_calls"] == a["storm"] and a["ledger_one_attempt"])
    add("storm: order desk: one refund per approval", f"{a['desk_refunds']} refunds, {a['desk_repeated']} repeated, "
        f"matches ledger: {a['desk_matches_ledger']}, {a['desk_refunded_cents']} cents",
        a["desk_refunds"] == a["storm"] and not a["desk_repeated"] and a["desk_matches_ledger"]
        and a["desk_refunded_cents"] == a["storm"])
    k = r["stack"]
    add("stack: worker task errors (runs re-enqueued by beat)", str(k["worker_task_errors"]))
    add("stack: requests sent again after a reset of a kept-alive connection", str(k.get("client_retries", 0)))
    add("stack: peak Postgres connections (this stack / server)",
        f"{k['db_connections_peak']} / {k['server_connections_peak']}")
    for phase in ("runs", "storm"):
        peaks = r[phase].get("queues_peak", {})
        add(f"{phase}: deepest queues (messages waiting; unacked)", ", ".join(f"{q} {c}" for q, c in peaks.items()))
        waits = sorted(r[phase].get("lock_waits", {}).items(), key=lambda kv: -kv[1])[:3]
        add(f"{phase}: sessions waiting for a lock (samples)", "; ".join(f"{c}x {lock_target(q)}" for q, c in waits)
            or "none seen")
    goals = targets(r)
    width = max(len(m) for m, _, _, _ in goals)
    head = [f"{'figure':<{width}}  {'measured':>10}  {'target':<12} result", "-" * (width + 34)]
    head += [f"{m:<{width}}  {v:>10}  {t:<12} {'PASS' if ok else 'FAIL'}" for m, v, t, ok in goals]
    width = max(len(m) for m, _, _ in rows)
    vwidth = max(len(v) for _, v, _ in rows)
    lines = [*head, "", f"{'':<{width}}  {'':<{vwidth}}  nothing lost", "-" * (width + vwidth + 16)]
    lines += [f"{m:<{width}}  {v:<{vwidth}}  {c}" for m, v, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    from bench import scratch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="concurrent short runs (default 200)")
    parser.add_argument("--storm", type=int, default=500, help="held calls decided through the API (default 500)")
    parser.add_argument("--clients", type=int, default=100, help="websocket clients on run pages (default 100)")
    parser.add_argument("--threads", type=int, default=16, help="HTTP client threads (default 16)")
    parser.add_argument("--web", type=int, default=2, help="web processes (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=4, help="children per worker (default 4, as compose)")
    parser.add_argument("--warm", type=int, default=-1, help="unmeasured runs first (default 2 per worker child)")
    parser.add_argument("--out", default="", help="the JSON file (default bench/results/load-<time>.json)")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock"
    if not url.startswith("postgres"):
        sys.exit("bench/load.py needs Postgres (DATABASE_URL=postgres://...).")
    with scratch.database(url, "airlock_bench_load") as db_url, \
            scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") as redis_url:
        configure(db_url, redis_url)
        report = measure(args)
    report["ok"] = "LOST" not in report["table"] and "FAIL" not in report["table"]
    return report


def measure(args) -> dict:
    begun = time.monotonic()
    s = setup()
    report: dict = {"started": datetime.now(UTC).isoformat(), "args": vars(args),
                    "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()}}
    sampler = Sampler()
    with ExitStack() as stack:
        bases, roles = [], {}
        for index in range(args.web):
            port, web = web_process(index)
            roles[stack.enter_context(web).pid] = "web"
            bases.append(f"http://127.0.0.1:{port}")
        for index in range(args.workers):
            roles[stack.enter_context(worker_process(index, args.concurrency)).pid] = "worker"
        roles[stack.enter_context(beat_process()).pid] = "beat"
        sampler.start()
        warm = args.warm if args.warm >= 0 else args.workers * args.concurrency * 2
        print(f"warming up the workers with {warm} runs ...", flush=True)
        report["warm_up"] = {"runs": warm, "seconds": warm_up(bases, s, warm, args.threads) if warm else 0}
        sampler.queues.clear()
        print(f"{args.runs} concurrent runs, {args.clients} websocket clients ...", flush=True)
        report["runs"] = concurrent_runs(bases, s, args.runs, args.clients, args.threads)
        report["runs"]["queues_peak"] = dict(sampler.queues)
        report["runs"]["lock_waits"] = dict(sampler.lock_waits)
        sampler.queues.clear()
        sampler.lock_waits.clear()
        print(f"approval storm of {args.storm} ...", flush=True)
        report["storm"] = approval_storm(bases, s, args.storm, args.threads, CpuByRole(roles))
        report["storm"]["queues_peak"] = dict(sampler.queues)
        report["storm"]["lock_waits"] = dict(sampler.lock_waits)
    sampler.stop.set()
    errors = worker_errors()
    report["stack"] = {"web": args.web, "workers": args.workers, "concurrency": args.concurrency,
                       "db_connections_peak": sampler.ours, "server_connections_peak": sampler.server,
                       "worker_task_errors": len(errors), "worker_task_error_samples": errors[:5],
                       "client_retries": len(RETRIES),
                       "queue_samples": sampler.samples}
    report["machine"]["load_after"] = os.getloadavg()
    report["seconds"] = round(time.monotonic() - begun, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / f"load-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    report["table"] = table(report, s)
    out.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(report["table"])
    load = report["machine"]
    print(f"\nrun in {report['seconds']} s on {os.cpu_count()} CPUs (load average {load['load_before'][0]:.1f} "
          f"before, {load['load_after'][0]:.1f} after); results: {out}")
    from apps.registry.pool import pool

    pool.close_all()
    return report


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
