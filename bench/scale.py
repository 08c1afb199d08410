"""Scale-out: what one more worker process or one more web process buys, and what runs waiting for a person cost.

    .venv/bin/python bench/scale.py [--runs 200] [--steps 5] [--concurrency 4] [--parked 10000] [--sample 100]
                                    [--shapes 1x1,1x2,2x1,2x2] [--only throughput,parked]

On a stack like bench/load.py's (uvicorn web processes, workers started as the compose file starts them, beat), on
a database and a Redis database of its own, removed after (bench/scratch.py):

1. Throughput by stack shape: 1 web + 1 worker, 1 web + 2 workers, 2 web + 1 worker, 2 web + 2 workers (each
   worker with `--concurrency` children), each started fresh and warmed up (two short runs per child, not
   measured). `--runs` runs of a crew of `--steps` reads (the scripted model; each step one model call and one
   read of the bundled order desk over stdio MCP) are started at once through the API from 16 client threads,
   taking turns between the web processes. Figures: runs/s and model steps/s from the first start to the last
   finish, and run starts answered per second by the API.
2. Parked runs (1 web, 1 worker): `--sample` runs whose one call (a refund, granted `approve`) waits are decided
   one after another and timed (decision -> the approved call dispatched -> the run finished); then
   `--parked` more runs are left waiting for a person; the worker's children's memory, the broker's queues and the
   database sessions are read before and after; then `--sample` more are decided and timed the same way, with the
   parked runs still waiting. A waiting run holds no worker, no task and no connection: the figures must not move.

It prints one table (figure, value, target, result) and writes bench/results/scale-<ts>.json; the exit status is
1 when a target is missed. On one machine the processes share its cores: a second worker or web process adds
throughput only while a core has time to spare (the table prints the load average). Not part of the test suite;
docs/benchmarks.md ("Scale-out") and docs/operations.md ("Sizing") cite it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import load  # noqa: E402
from bench.live import _children, _rss_mb  # noqa: E402
from bench.run import RESULTS  # noqa: E402

SHAPES = [(1, 1), (1, 2), (2, 1), (2, 2)]  # (web processes, worker processes)
THREADS = 16
PARKED_MEMORY_MB = 5.0  # a worker child may not grow by more while runs wait (the memory row's growth target)
RESUME_RATIO = 1.25  # a decision with the runs parked, against one without: p50 within this


def crew_of_reads(s: dict, steps: int) -> str:
    """A crew whose one agent reads orders `steps` times, then answers: `steps` model steps with a tool call. The
    three orders of the desk in turn: the same call with the same arguments may run twice in a run
    (apps/runs/engine/limits.py, REPEAT_LIMIT), so up to six steps."""
    if steps > 6:
        raise SystemExit("--steps: at most 6 (three orders, each read at most twice in a run)")
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.agents.models import LlmConnection
    from apps.crews import services as crews

    actor = member_actor(Membership.objects.select_related("user", "org").get(org_id=s["org_id"], role="owner"))
    connection = LlmConnection.objects.get(org_id=s["org_id"], provider="scripted")
    reads = [{"call": [{"tool": "orders.get_order_status", "args": {"order_id": f"A-100{1 + n % 3}"}}]}
             for n in range(steps)]
    reader = agents.create_agent(
        actor=actor, name=f"Reader x{steps}", connection_id=connection.id,
        script=[*reads, {"say": f"Read {steps} orders.\nSTATUS: done\nREASON: reads"}],
        grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = crews.create_crew(actor=actor, name=f"Reads x{steps}", process="sequential",
                             inputs=[{"name": "order_id", "type": "string", "required": True}],
                             tasks=[{"name": "read", "agent_id": reader.id, "description": "Read the orders."}])
    return str(crew.id)


class Stack(ExitStack):
    """Web processes, workers and beat, started fresh, stopped when the block ends."""

    def __init__(self, web: int, workers: int, concurrency: int) -> None:
        super().__init__()
        self.shape, self.concurrency = (web, workers), concurrency
        self.bases: list[str] = []
        self.workers: list = []

    def __enter__(self) -> Stack:
        super().__enter__()
        web, workers = self.shape
        for index in range(web):
            port, process = load.web_process(index)
            self.enter_context(process)
            self.bases.append(f"http://127.0.0.1:{port}")
        for index in range(workers):
            self.workers.append(self.enter_context(load.worker_process(index, self.concurrency)))
        self.enter_context(load.beat_process())
        return self

    def children_mb(self) -> list[float]:
        return [round(_rss_mb(child), 1) for worker in self.workers for child in _children(worker.pid)]


def start_runs(stack: Stack, crew: str, inputs: list[dict], token: str) -> tuple[list[str], list[float], float]:
    """Starts a run per input through the API at once; (run ids, start latencies in ms, wall seconds)."""
    items = [(f"{stack.bases[n % len(stack.bases)]}/api/v1/crews/{crew}/runs", {"inputs": body})
             for n, body in enumerate(inputs)]
    answers, latencies, errors, wall = load.timed_requests("POST", items, token, THREADS, ok=201)
    if errors:
        raise RuntimeError(f"{len(errors)} runs failed to start: {errors[:3]}")
    return [a["id"] for a in answers], latencies, wall


def finish(ids: list[str], timeout: float = 1800) -> None:
    from apps.runs.models import Run

    load.wait_until(f"{len(ids)} runs to finish", lambda: Run.objects.filter(
        id__in=ids, status__in=load.TERMINAL).count() == len(ids), timeout=timeout, interval=0.25)


def throughput(s: dict, crew: str, shape: tuple[int, int], args) -> dict:
    from django.db.models import Count, Max, Min, Q

    from apps.runs.models import Run

    with Stack(*shape, args.concurrency) as stack:
        warm = shape[1] * args.concurrency * 2
        finish(start_runs(stack, s["short"], [{"order_id": "A-1001"}] * warm, s["starter"])[0])
        load_before = os.getloadavg()[0]
        began = time.time()
        ids, latencies, wall = start_runs(stack, crew, [{"order_id": "A-1002"}] * args.runs, s["starter"])
        finish(ids)
        rows = Run.objects.filter(id__in=ids).aggregate(
            last=Max("finished_at"), first=Min("created_at"), steps=Count("steps", filter=Q(steps__kind="llm")),
            ok=Count("id", filter=Q(status="succeeded"), distinct=True))
        seconds = max(rows["last"].timestamp() - began, 1e-6)
        return {"web": shape[0], "workers": shape[1], "children": shape[1] * args.concurrency, "runs": len(ids),
                "succeeded": rows["ok"], "steps": rows["steps"], "seconds": round(seconds, 2),
                "runs_per_s": round(len(ids) / seconds, 1), "steps_per_s": round(rows["steps"] / seconds, 1),
                "starts_per_s": round(len(ids) / wall, 1), "start_ms": load.ms(latencies),
                "load_before": round(load_before, 1), "load_after": round(os.getloadavg()[0], 1)}


def broker_state() -> dict:
    import redis

    from config.celery import WORKER_QUEUES

    broker = redis.Redis.from_url(os.environ["REDIS_URL"])
    queues = {name: broker.llen(name) for name in WORKER_QUEUES.split(",")}
    tasks: dict[str, int] = {}  # what waits, by task name (a sample of each queue's head)
    for name in queues:
        for raw in broker.lrange(name, 0, 199):
            task = json.loads(raw).get("headers", {}).get("task", "?")
            tasks[task] = tasks.get(task, 0) + 1
    return {"queued": sum(queues.values()), "unacked": broker.hlen("unacked"), "queues": queues, "tasks": tasks,
            "redis_used_mb": round(broker.info("memory")["used_memory"] / 2**20, 1)}


def drained(timeout: float = 900) -> float:
    """Seconds until the broker holds no message (the work the parking caused: each held call's notifications)."""
    started = time.perf_counter()
    load.wait_until("the queues to drain", lambda: broker_state()["queued"] + broker_state()["unacked"] == 0,
                    timeout=timeout, interval=1)
    return round(time.perf_counter() - started, 1)


def database_state() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        # Busy: running a statement or inside a transaction. Idle sessions are the processes' pools (the web keeps
        # up to AIRLOCK_DB_POOL_SIZE open after a burst of requests), not anything a waiting run holds.
        cursor.execute("SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        sessions, busy = cursor.fetchone()
        cursor.execute("SELECT pg_database_size(current_database())")
        size = cursor.fetchone()[0]
    return {"sessions": sessions, "busy_sessions": busy, "database_mb": round(size / 2**20, 1)}


def park(stack: Stack, s: dict, prefix: str, count: int) -> list[str]:
    """`count` held-refund runs, each waiting for a person; their ids."""
    from apps.runs.models import Run

    ids = []
    for chunk in range(0, count, 1000):  # a thousand at a time: the API answers, the workers keep up
        ids += start_runs(stack, s["held"], [{"order_id": f"{prefix}-{n:05d}"}
                                             for n in range(chunk, min(count, chunk + 1000))], s["starter"])[0]
    load.wait_until(f"{count} runs to wait", lambda: Run.objects.filter(id__in=ids, status="waiting").count()
                    == len(ids), timeout=3600, interval=1)
    return ids


def decide_in_turn(stack: Stack, s: dict, ids: list[str]) -> dict:
    """Decides the runs' approvals one after another, as a person works through an inbox; timings in ms."""
    from apps.approvals.models import ApprovalRequest
    from apps.runs.models import Run, ToolCall

    pending = list(ApprovalRequest.objects.filter(run_id__in=ids, status="pending").values_list("id", flat=True))
    items = [(f"{stack.bases[n % len(stack.bases)]}/api/v1/approvals/{a}/decision", {"decision": "approve"})
             for n, a in enumerate(pending)]
    _, latencies, errors, _ = load.timed_requests("POST", items, s["approver"], 1, ok=200)
    finish(ids)
    decided = dict(ApprovalRequest.objects.filter(id__in=pending).values_list("id", "decided_at"))
    calls = ToolCall.objects.filter(approval_id__in=pending, state="succeeded").values_list(
        "approval_id", "run_id", "dispatched_at")
    finished = dict(Run.objects.filter(id__in=ids).values_list("id", "finished_at"))
    dispatch = [(at - decided[a]).total_seconds() * 1000 for a, _, at in calls]
    rest = [(finished[r] - at).total_seconds() * 1000 for _, r, at in calls]
    return {"decided": len(pending), "errors": len(errors), "decision_ms": load.ms(latencies),
            "decided_to_dispatched_ms": load.ms(dispatch), "dispatched_to_finished_ms": load.ms(rest),
            "succeeded": Run.objects.filter(id__in=ids, status="succeeded").count()}


def parked(s: dict, args) -> dict:
    with Stack(1, 1, args.concurrency) as stack:
        warm = args.concurrency * 2
        finish(start_runs(stack, s["short"], [{"order_id": "A-1001"}] * warm, s["starter"])[0])
        before = park(stack, s, "B", args.sample)
        first = decide_in_turn(stack, s, before)
        idle = {"children_mb": stack.children_mb(), **broker_state(), **database_state()}
        started = time.perf_counter()
        waiting = park(stack, s, "P", args.parked)
        parking_s = time.perf_counter() - started
        # The parking's own work may still be queued (each held call's notifications): done, not held
        backlog = broker_state()
        drain_s = drained()
        time.sleep(5)  # what a waiting run might still hold would show by now: a lease, a session, a task
        held = {"children_mb": stack.children_mb(), **broker_state(), **database_state()}
        after = park(stack, s, "A", args.sample)
        second = decide_in_turn(stack, s, after)
        from apps.runs.models import Run

        still = Run.objects.filter(id__in=waiting, status="waiting").count()
    growth = max(held["children_mb"]) - max(idle["children_mb"])
    return {"parked": len(waiting), "still_waiting": still, "parking_s": round(parking_s, 1),
            "backlog_when_parked": backlog, "drain_s": drain_s,
            "before": idle, "while_parked": held, "child_growth_mb": round(growth, 1),
            "database_mb_per_1000_parked": round((held["database_mb"] - idle["database_mb"]) * 1000 / len(waiting), 2),
            "decisions_without": first, "decisions_with": second}


def rows(r: dict) -> list[tuple[str, str, str, bool | None]]:
    """(figure, value, target, met or None for info) of a report, for this script's table and bench/run.py's."""
    out: list[tuple[str, str, str, bool | None]] = []
    concurrency = r["args"]["concurrency"]
    base = next((t for t in r["throughput"] if (t["web"], t["workers"]) == (1, 1)), None)
    for t in r["throughput"]:
        scale = f" ({t['steps_per_s'] / base['steps_per_s']:.2f}x)" if base else ""
        out.append((f"{t['web']} web, {t['workers']} worker(s) of {concurrency}: runs/s | steps/s",
                    f"{t['runs_per_s']} | {t['steps_per_s']}{scale}, load {t['load_before']}", "info", None))
        out.append(("  run starts answered/s | start p50/p95 ms",
                    f"{t['starts_per_s']} | {t['start_ms'][0]}/{t['start_ms'][1]}", "info", None))
        if t["succeeded"] != t["runs"]:
            out.append(("  runs that did not succeed", str(t["runs"] - t["succeeded"]), "0", False))
    p = r["parked"]
    if p:
        before, held = p["before"], p["while_parked"]
        out.append(("runs parked waiting for a person", f"{p['still_waiting']:,} (parked in {p['parking_s']} s)",
                    f"{p['parked']:,}", p["still_waiting"] == p["parked"]))
        backlog = p["backlog_when_parked"]
        out.append(("  their own work still queued, then drained", f"{backlog['queued'] + backlog['unacked']:,} "
                    f"messages, {p['drain_s']} s", "info", None))
        out.append(("  worker child memory, growth while parked", f"{p['child_growth_mb']} MB "
                    f"({max(before['children_mb'])} -> {max(held['children_mb'])})", f"<= {PARKED_MEMORY_MB} MB",
                    p["child_growth_mb"] <= PARKED_MEMORY_MB))
        messages = held["queued"] + held["unacked"]
        out.append(("  broker messages held (queued + unacked)", str(messages), "0", messages == 0))
        out.append(("  database sessions busy while parked (all open)", f"{held['busy_sessions']} "
                    f"({before['sessions']} -> {held['sessions']})", "0", held["busy_sessions"] == 0))
        out.append(("  database | Redis memory, idle -> parked", f"+{p['database_mb_per_1000_parked']} MB per "
                    f"1,000 | {before['redis_used_mb']} -> {held['redis_used_mb']} MB", "info", None))
        without, with_ = p["decisions_without"], p["decisions_with"]
        for figure, label in (("decided_to_dispatched_ms", "decided -> dispatched"),
                              ("dispatched_to_finished_ms", "dispatched -> run finished")):
            a, b = without[figure], with_[figure]
            ratio = b[0] / a[0] if a[0] else float("inf")
            out.append((f"  {label} p50/p95 ms, without -> with", f"{a[0]}/{a[1]} -> {b[0]}/{b[1]} ({ratio:.2f}x)",
                        f"p50 <= {RESUME_RATIO}x", ratio <= RESUME_RATIO))
        done, decided = without["succeeded"] + with_["succeeded"], without["decided"] + with_["decided"]
        out.append(("  decided runs that finished", f"{done} of {decided}", "all",
                    done == decided and not without["errors"] + with_["errors"]))
    return out


def render(found: list[tuple[str, str, str, bool | None]]) -> str:
    width = max((len(row[0]) for row in found), default=10) + 2
    lines = [f"{'figure':<{width}}{'value':<48}{'target':<14}result", "-" * (width + 74)]
    lines += [f"{a:<{width}}{b:<48}{c:<14}{ {True: 'PASS', False: 'FAIL', None: 'info'}[d]}" for a, b, c, d in found]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench import scratch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per stack shape (default 200)")
    parser.add_argument("--steps", type=int, default=5, help="model steps with a read per run (default 5)")
    parser.add_argument("--concurrency", type=int, default=4, help="children per worker (default 4, as compose)")
    parser.add_argument("--parked", type=int, default=10_000, help="runs left waiting for a person (default 10000)")
    parser.add_argument("--sample", type=int, default=100, help="decisions timed without and with them (default 100)")
    parser.add_argument("--shapes", default=",".join(f"{w}x{k}" for w, k in SHAPES),
                        help="stack shapes as WEBxWORKERS (default 1x1,1x2,2x1,2x2)")
    parser.add_argument("--only", default="throughput,parked", help="throughput, parked or both (default)")
    parser.add_argument("--out", default="", help="the JSON file (default bench/results/scale-<time>.json)")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock"
    if not url.startswith("postgres"):
        sys.exit("bench/scale.py needs Postgres (DATABASE_URL=postgres://...).")
    begun = time.monotonic()
    report: dict = {"started": datetime.now(UTC).isoformat(), "args": vars(args),
                    "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()}, "throughput": [],
                    "parked": None}
    with scratch.database(url, "airlock_bench_scale") as db_url, \
            scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") as redis_url:
        load.configure(db_url, redis_url)
        s = load.setup()
        crew = crew_of_reads(s, args.steps)
        if "throughput" in args.only:
            for shape in [tuple(int(n) for n in spec.split("x")) for spec in args.shapes.split(",")]:
                print(f"{shape[0]} web, {shape[1]} worker(s): {args.runs} runs of {args.steps} steps ...", flush=True)
                report["throughput"].append(throughput(s, crew, shape, args))
        if "parked" in args.only:
            print(f"parking {args.parked:,} runs, deciding {args.sample} before and {args.sample} after ...",
                  flush=True)
            report["parked"] = parked(s, args)
        from apps.registry.pool import pool

        pool.close_all()
    found = rows(report)
    text, ok = render(found), all(met is not False for *_, met in found)
    report.update(table=text, ok=ok, seconds=round(time.monotonic() - begun, 1))
    report["machine"]["load_after"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / f"scale-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"\n{text}\n\nrun in {report['seconds']} s on {os.cpu_count()} CPUs; results: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
