"""Fault tests: real workers, beat and web processes on a private Redis, a slow demo MCP server, and
the invariants every fault test checks.

Every process here uses its own redis-server (started for this directory on a free port), so the
tests can stop and restart Redis, and no other worker of the session (the `worker` fixture) takes
their tasks. The processes run `tests.reliability.settings` (short leases from the environment) and
the `tests.reliability.faultapp` Celery app (beat sweeping every second, the poison switch).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.crews import services as crew_services
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs import decisions, services
from apps.runs.models import CallState, Run, RunEvent, ToolCall
from config.celery import WORKER_QUEUES
from tests.processes import ROOT, RedisServer, child_env, stop_group, wait_for_port, wait_for_text

SLOW = "orders.slow_refund"
ENDED = {"succeeded", "failed", "cancelled", "timed_out", "limit_exceeded"}
TAG_INPUT = [{"name": "tag", "type": "string", "required": True}]


# --- processes ------------------------------------------------------------------------------------

class Cluster:
    """Workers, beat and web processes of one test, all on the private Redis; stopped afterwards."""

    def __init__(self, logs: Path, redis: RedisServer, lease_s: float | None = None) -> None:
        self.logs, self.redis, self.lease_s = logs, redis, lease_s
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = child_env(DJANGO_SETTINGS_MODULE="tests.reliability.settings")
        if self.lease_s is not None:  # else production's lease, heartbeat and sweep
            env.update(AIRLOCK_RUN_LEASE_S=str(self.lease_s), AIRLOCK_RUN_REQUEUE_AFTER_S=str(self.lease_s))
        env.update(REDIS_URL=self.redis.url, **extra)
        return env

    def _spawn(self, name: str, argv: list[str], **extra: str) -> tuple[subprocess.Popen, Path]:
        log = self.logs / f"{name}-{time.monotonic_ns()}.log"
        with log.open("w") as out:
            proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=self.env(**extra), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        proc.log = log
        return proc, log

    def worker(self, concurrency: int = 2, **extra: str) -> subprocess.Popen:
        proc, log = self._spawn("worker", [
            "-m", "celery", "-A", "tests.reliability.faultapp", "worker", "-Q", WORKER_QUEUES, "-l", "info",
            "--concurrency", str(concurrency), "--without-mingle", "--without-gossip", "--without-heartbeat",
            "-n", f"faults-{time.monotonic_ns()}@%h"], **extra)
        wait_for_text(log, "ready.", proc, timeout=60)
        return proc

    def beat(self) -> subprocess.Popen:
        schedule = self.logs / f"beat-{time.monotonic_ns()}.schedule"
        proc, log = self._spawn("beat", ["-m", "celery", "-A", "tests.reliability.faultapp", "beat", "-l", "info",
                                         "-s", str(schedule), "--max-interval", "1"])
        wait_for_text(log, "beat: Starting", proc, timeout=60)
        return proc

    def web(self, port: int) -> subprocess.Popen:
        proc, log = self._spawn("web", ["-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
                                        "--port", str(port), "--no-access-log"])
        wait_for_port(port, proc, log, timeout=60)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop_group(proc, timeout=3)


@pytest.fixture(scope="session")
def fault_redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("fault-redis"))
    server.start()
    yield server
    server.stop()


def _point_celery_at(url: str, options: dict | None = None) -> dict:
    """Points this process's Celery at `url` with the transport options the workers there use (a Redis
    broker's, with this session's key prefix, also when this process itself runs embedded). Returns the
    options it replaced."""
    from django.conf import settings

    from config.celery import app

    before = app.conf.broker_transport_options
    app._pool = None  # kombu keeps the pools per URL: the old one stays usable for whoever comes next
    app.amqp._producer_pool = None
    app.conf.broker_url = url
    app.conf.broker_transport_options = options if options is not None else {
        "visibility_timeout": 3600, "global_keyprefix": f"{settings.RUN_ID}:"}
    return before


@pytest.fixture
def broker(fault_redis):
    """This process enqueues (resumes after a person's decision) on the private Redis too."""
    from config.celery import app

    if fault_redis.proc.poll() is not None:  # a test left it stopped
        fault_redis.start()
    before = app.conf.broker_url
    options = _point_celery_at(fault_redis.url)
    yield fault_redis
    _point_celery_at(before, options)


@pytest.fixture
def cluster(broker, process_logs, request):
    """Processes for one test, with production's lease timings (a heartbeat keeps a live worker's lease
    however long a step takes) unless a test sets `cluster.lease_s` before starting them (it also sets how
    long a queued run waits before its message counts as lost). A test that killed a worker may let the
    time pass with `lease_runs_out`."""
    logs = process_logs / request.node.name.replace("/", "_")[:80]
    logs.mkdir(exist_ok=True)
    group = Cluster(logs, broker)
    yield group
    group.close()


# --- the slow order desk ----------------------------------------------------------------------------

@dataclass
class SlowDesk:
    actor: object
    data: Path
    connection: object

    def store(self) -> dict:
        return json.loads(self.data.read_text()) if self.data.exists() else {}

    def executed(self, tag: str) -> Counter:
        """How many times the desk executed each slow refund of this run (by request_id)."""
        return Counter(r for r in self.store().get("slow_calls", []) if r.startswith(f"{tag}-"))

    def crew(self, name: str, slow_calls: int, *, lookups: bool = True):
        """One agent: (a lookup,) `slow_calls` slow refunds with request ids `<tag>-<n>`, then done."""
        look = [{"call": [{"tool": "orders.get_order_status", "args": {"order_id": "A-1003"}}]}] if lookups else []
        calls = [{"call": [{"tool": SLOW, "args": {"order_id": "A-1003", "amount_cents": 1,
                                                   "request_id": f"{{{{input.tag}}}}-{n}"}}]}
                 for n in range(1, slow_calls + 1)]
        clerk = agent_services.create_agent(
            actor=self.actor, name=f"{name} clerk", connection_id=self.connection.id,
            script=[*look, *calls, {"say": "All refunds made.\nSTATUS: done\nREASON: ok"}],
            grants=[{"tool": "orders.get_order_status", "policy": "auto"}, {"tool": SLOW, "policy": "auto"}],
            max_steps=slow_calls + 4)
        return crew_services.create_crew(
            actor=self.actor, name=name, process="sequential", inputs=TAG_INPUT,
            tasks=[{"name": "refund", "agent_id": clerk.id, "description": "Refunds for {tag}.", "context": []}])

    def held_crew(self, name: str):
        """One agent: one slow refund (request id `<tag>-1`) that waits for a person, then an answer."""
        clerk = agent_services.create_agent(
            actor=self.actor, name=f"{name} clerk", connection_id=self.connection.id,
            script=[{"call": [{"tool": SLOW, "args": {"order_id": "A-1003", "amount_cents": 1,
                                                      "request_id": "{{input.tag}}-1"}}]},
                    {"say": "Refunded.\nSTATUS: done\nREASON: ok"}],
            grants=[{"tool": SLOW, "policy": "approve"}], max_steps=4)
        return crew_services.create_crew(
            actor=self.actor, name=name, process="sequential", inputs=TAG_INPUT,
            tasks=[{"name": "refund", "agent_id": clerk.id, "description": "Refund for {tag}.", "context": []}])

    def start(self, crew, tag: str) -> Run:
        return services.start_run(actor=self.actor, crew_id=crew.id, inputs={"tag": tag})


@pytest.fixture
def slow_seconds():
    """How long a slow refund takes (override with `@pytest.mark.parametrize("slow_seconds", [...])`)."""
    return 1.0


@pytest.fixture
def slow_desk(owner, tmp_path, slow_seconds):
    actor = member_actor(owner)
    data = tmp_path / "orders.json"
    server = registry_services.create_server(
        actor=actor, name="orders", transport="stdio", trust_tier="internal", command=sys.executable,
        args=["-m", "tests.reliability.slow_desk", "stdio"], cwd=str(ROOT),
        env={"ORDER_DESK_DATA": str(data), "SLOW_DESK_SECONDS": str(slow_seconds)}, sync=False)
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    yield SlowDesk(actor, data, connection)
    pool.close_all()


# --- waiting and the invariants ----------------------------------------------------------------------

def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_status(run_id, statuses, timeout: float = 60) -> Run:
    def done():
        run = Run.objects.get(id=run_id)
        return run if run.status in statuses else None

    try:
        return wait_until(done, timeout, f"run {run_id} to be {sorted(statuses)}", interval=0.2)
    except AssertionError:
        run = Run.objects.get(id=run_id)
        raise AssertionError(f"run stayed {run.status} (error {run.error!r}, deliveries {run.deliveries}, "
                             f"lease {run.lease_owner} until {run.lease_expires_at})") from None


def wait_in_flight(desk: SlowDesk, run_id, tag: str, n: int = 1, timeout: float = 60) -> ToolCall:
    """Until the run's n-th slow refund is `dispatched` and the desk has started executing it."""
    def in_flight():
        row = (ToolCall.objects.filter(run_id=run_id, qualified_name=SLOW, state=CallState.DISPATCHED,
                                       arguments__request_id=f"{tag}-{n}").first())
        return row if row and desk.executed(tag)[f"{tag}-{n}"] else None

    return wait_until(in_flight, timeout, f"slow refund #{n} of run {run_id} in flight", interval=0.05)


def log_size(proc: subprocess.Popen) -> int:
    return len(proc.log.read_text(errors="replace"))


def wait_for_log(proc: subprocess.Popen, text: str, after: int = 0, timeout: float = 30) -> None:
    wait_until(lambda: text in proc.log.read_text(errors="replace")[after:], timeout, f"{text!r} in {proc.log.name}")


def lease_runs_out(run_id) -> None:
    """Time passes: the lease of a run whose worker died expires (instead of waiting 30 s for it)."""
    Run.objects.filter(id=run_id, status="running").update(lease_expires_at=timezone.now())


def check_invariants(run_id, desk: SlowDesk, tag: str) -> Run:
    """What must hold after any fault: an accepted end state, the desk's side effects match the
    ledger exactly (nothing executed twice, nothing executed that the ledger does not show as sent),
    and the run's events are numbered 1..last_seq without a gap."""
    run = Run.objects.get(id=run_id)
    assert run.status in ("succeeded", "waiting") or (run.status == "failed" and run.error.strip()), \
        f"{run.status}: {run.error!r}"
    if run.status == "waiting":
        waiting = RunEvent.objects.filter(run=run, type="run.waiting").order_by("-seq").first()
        assert waiting is not None and waiting.data.get("reason"), "a waiting run says why"
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, run.last_seq + 1)), f"event seq gap: {seqs}"
    executed = desk.executed(tag)
    assert all(count == 1 for count in executed.values()), f"executed twice: {executed}"
    rows = list(ToolCall.objects.filter(run=run, qualified_name=SLOW))
    assert all(r.attempts <= 1 for r in rows), [(r.arguments, r.attempts) for r in rows]
    sent = {r.arguments["request_id"] for r in rows if r.dispatched_at is not None}
    assert set(executed) <= sent, f"executed but never sent per the ledger: {set(executed) - sent}"
    succeeded = {r.arguments["request_id"] for r in rows if r.state == CallState.SUCCEEDED}
    assert succeeded <= set(executed), f"ledger says succeeded, desk never saw: {succeeded - set(executed)}"
    if run.status == "succeeded":
        assert not [r for r in rows if r.state in (CallState.UNKNOWN, CallState.DISPATCHED)]
        assert succeeded == set(executed), (succeeded, executed)
    return run


def settle(run_id, desk: SlowDesk, tag: str, timeout: float = 90) -> Run:
    """Drives a run to its end the way a person would: each `unknown` call is checked against the desk
    and resolved (it happened or not), never re-sent. Checks the invariants at every stop."""
    deadline = time.monotonic() + timeout
    while True:
        run = wait_status(run_id, ENDED | {"waiting"}, timeout=max(1.0, deadline - time.monotonic()))
        check_invariants(run_id, desk, tag)
        if run.status != "waiting":
            return run
        unknown = list(ToolCall.objects.filter(run_id=run_id, state=CallState.UNKNOWN))
        assert unknown, "a run that waits without a held call waits for an unknown one"
        for row in unknown:  # a slow refund happened if the desk has it; a lookup changed nothing
            happened = row.qualified_name != SLOW or desk.executed(tag)[row.arguments["request_id"]] > 0
            decisions.resolve_unknown_call(actor=desk.actor, tool_call_id=row.id,
                                          outcome="succeeded" if happened else "failed")
        wait_until(lambda: Run.objects.get(id=run_id).status != "waiting", 10, "the run to resume")
