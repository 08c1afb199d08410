"""How long a run waits after its worker is SIGKILLed, with production's lease, heartbeat and sweep timings.

    .venv/bin/python bench/recovery.py [--kills 5]

Two workers and beat on a database of their own; each round starts a run of three slow refunds
(tests/reliability/slow_desk.py over stdio MCP, 1 s each) and kills the worker driving it, `--kills` times
in each of three places:

- mid-call: the whole worker (main process, pool, MCP servers: a lost machine) while refund #2 is in flight
  (a new worker is started in its place);
- between steps: the pool process, right before the engine's 4th step (after refund #1);
- after a decision: the pool process that claims a run right after a person approved its held refund.

The time to takeover is from the kill to the run's `run.recovered` event (another worker claimed it). Each run
is then settled as a person would (an `unknown` refund is checked against the desk and resolved) and must end
`succeeded` with every refund executed exactly once. Prints median and max per place and overall; results in
bench/results/recovery-<timestamp>.json. A database of its own on DATABASE_URL's server and an empty Redis
database of REDIS_URL's server, made for the run and removed after it (bench/scratch.py). Not part of the test
suite.
docs/operations.md ("When a worker dies").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections import Counter
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import scratch  # noqa: E402
from bench.run import RESULTS  # noqa: E402

WORK = ROOT / "var" / "bench" / "recovery"
DESK_DATA = WORK / "orders.json"
KILL_FILE = WORK / "kill-once"
PLACES = ("mid-call", "between steps", "after a decision")
SLOW = "orders.slow_refund"


# --- environment -----------------------------------------------------------------------------------------

def configure(db_url: str, redis_url: str) -> None:
    """Production settings for this process and the ones it starts, on the run's own database and Redis db."""
    from cryptography.fernet import Fernet

    os.environ.update({
        "DATABASE_URL": db_url, "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0", "SECRET_KEY": "bench-recovery-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "0",
        "AIRLOCK_CHANNEL_PREFIX": "airlock-recovery", "AIRLOCK_EGRESS_ALLOW_PRIVATE": "1",
        "FAULTS_KILL_ONCE_FILE": str(KILL_FILE),
    })
    os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", Fernet.generate_key().decode())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.chdir(ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    WORK.mkdir(parents=True, exist_ok=True)
    for path in (DESK_DATA, DESK_DATA.with_suffix(".lock"), KILL_FILE, KILL_FILE.with_name("kill-once.kills")):
        path.unlink(missing_ok=True)


def setup() -> dict:
    """An org with an owner and an approver, the slow desk over stdio, a crew of three slow refunds (run
    straight through) and one of a held slow refund."""
    from apps.accounts import services as accounts
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.approvals.definition_changes import inbox
    from apps.crews import services as crews
    from apps.registry import services as registry

    owner_user = accounts.ensure_user(email="recovery@example.com", password="recovery-password-123")
    org, _, _ = accounts.create_organization(name="Recovery", owner_email=owner_user.email)
    owner = member_actor(Membership.objects.select_related("user", "org").get(org=org, role="owner"))
    member, _ = accounts.add_member(actor=owner, email="approver@example.com", role="approver")
    approver = member_actor(member)
    server = registry.create_server(actor=owner, name="orders", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "tests.reliability.slow_desk", "stdio"],
                                    cwd=str(ROOT), env={"ORDER_DESK_DATA": str(DESK_DATA), "SLOW_DESK_SECONDS": "1"},
                                    sync=False)
    report = registry.sync_server(actor=owner, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=owner, name="Scripted", provider="scripted")
    inputs = [{"name": "tag", "type": "string", "required": True}]

    def crew(name: str, calls: int, policy: str):
        refunds = [{"call": [{"tool": SLOW, "args": {"order_id": "A-1003", "amount_cents": 1,
                                                     "request_id": f"{{{{input.tag}}}}-{n}"}}]}
                   for n in range(1, calls + 1)]
        clerk = agents.create_agent(actor=owner, name=f"{name} clerk", connection_id=connection.id,
                                    script=[*refunds, {"say": "Refunded.\nSTATUS: done\nREASON: ok"}],
                                    grants=[{"tool": SLOW, "policy": policy}], max_steps=calls + 3)
        return crews.create_crew(actor=owner, name=name, process="sequential", inputs=inputs,
                                 tasks=[{"name": "refund", "agent_id": clerk.id, "description": "Refunds for {tag}."}])

    return {"owner": owner, "approver": approver, "straight": crew("Three refunds", 3, "auto"),
            "held": crew("Held refund", 1, "approve")}


def worker():
    from bench.live import process
    from config.celery import WORKER_QUEUES

    return process(f"recovery-worker-{time.monotonic_ns()}", [
        sys.executable, "-m", "celery", "-A", "tests.reliability.faultapp", "worker", "-Q", WORKER_QUEUES,
        "--concurrency", "1", "--without-mingle", "--without-gossip", "-l", "info",
        "-n", f"recovery-{time.monotonic_ns()}@%h"], ready="ready.")


def beat():
    from bench.live import process

    schedule = WORK / "beat-schedule"
    schedule.unlink(missing_ok=True)
    return process("recovery-beat", [sys.executable, "-m", "celery", "-A", "tests.reliability.faultapp", "beat",
                                     "-l", "info", "-s", str(schedule)], ready="beat: Starting")


# --- one round -----------------------------------------------------------------------------------------------

def wait_until(what: str, predicate, timeout: float = 120, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def executed(tag: str) -> Counter:
    data = json.loads(DESK_DATA.read_text()) if DESK_DATA.exists() else {}
    return Counter(r for r in data.get("slow_calls", []) if r.startswith(f"{tag}-"))


def kill_mid_call(s: dict, tag: str, stack: ExitStack) -> tuple[str, float]:
    from apps.runs import services
    from apps.runs.models import Run, ToolCall

    run = services.start_run(actor=s["owner"], crew_id=s["straight"].id, inputs={"tag": tag})
    wait_until("refund #2 in flight", lambda: ToolCall.objects.filter(
        run_id=run.id, state="dispatched", arguments__request_id=f"{tag}-2").exists() and executed(tag)[f"{tag}-2"])
    pid = int(Run.objects.get(id=run.id).lease_owner.split(":")[1])
    killed_at = time.time()
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    stack.enter_context(worker())  # in the lost machine's place, for the next rounds
    return str(run.id), killed_at


def kill_between_steps(s: dict, tag: str, stack: ExitStack) -> tuple[str, float]:
    from apps.runs import services

    run = services.start_run(actor=s["owner"], crew_id=s["straight"].id, inputs={"tag": tag})
    KILL_FILE.write_text(f"{run.id} 4\n")  # before the 4th step of its task: refund #1 done, #2 not yet asked for
    return str(run.id), killed_once(str(run.id))


def kill_after_decision(s: dict, tag: str, stack: ExitStack) -> tuple[str, float]:
    from apps.runs import decisions, services
    from apps.runs.models import Run, ToolCall

    run = services.start_run(actor=s["owner"], crew_id=s["held"].id, inputs={"tag": tag})
    wait_until("the held refund", lambda: Run.objects.get(id=run.id).status == "waiting")
    request = ToolCall.objects.get(run_id=run.id, state="held").approval
    KILL_FILE.write_text(f"{run.id} 1\n")  # the worker resuming it dies right after its claim
    decisions.decide_approval(actor=s["approver"], approval_id=request.id, decision="approve")
    return str(run.id), killed_once(str(run.id))


def killed_once(run_id: str) -> float:
    kills = KILL_FILE.with_name("kill-once.kills")

    def fired():
        lines = kills.read_text().splitlines() if kills.exists() else []
        return next((float(line.split()[2]) for line in lines if line.startswith(run_id)), None)

    return wait_until("the kill", fired)


def recovered_after(run_id: str, killed_at: float) -> float:
    from apps.runs.models import RunEvent

    after = datetime.fromtimestamp(killed_at, tz=UTC)
    event = wait_until("the takeover", lambda: RunEvent.objects.filter(
        run_id=run_id, type="run.recovered", at__gt=after).first())
    return event.at.timestamp() - killed_at


def settle(s: dict, run_id: str, tag: str, calls: int) -> str:
    """Resolves each `unknown` refund from the desk's own record, as a person would; checks exactly once."""
    from apps.runs import decisions
    from apps.runs.models import Run, ToolCall

    while True:
        run = wait_until("the run to stop", lambda: (r := Run.objects.get(id=run_id)).status in (
            "succeeded", "failed", "cancelled", "timed_out", "limit_exceeded", "waiting") and r)
        if run.status != "waiting":
            break
        for row in ToolCall.objects.filter(run_id=run_id, state="unknown"):
            happened = executed(tag)[row.arguments["request_id"]] > 0
            decisions.resolve_unknown_call(actor=s["approver"], tool_call_id=row.id,
                                          outcome="succeeded" if happened else "failed")
        unknown = ToolCall.objects.filter(run_id=run_id, state="unknown").exists()
        if not unknown and not ToolCall.objects.filter(run_id=run_id, state="held").exists():
            wait_until("the run to resume", lambda: Run.objects.get(id=run_id).status != "waiting", 30)
    once = executed(tag) == Counter({f"{tag}-{n}": 1 for n in range(1, calls + 1)})
    return run.status if once else f"{run.status}, refunds {dict(executed(tag))} (NOT exactly once)"


# --- main ----------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5, help="kills in each place (default 5)")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock"
    if not url.startswith("postgres"):
        sys.exit("bench/recovery.py needs Postgres (DATABASE_URL=postgres://...).")
    with scratch.database(url, "airlock_bench_recovery") as db_url, \
            scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") as redis_url:
        configure(db_url, redis_url)
        return measure(args)


def measure(args) -> dict:
    s = setup()
    from django.conf import settings

    timings = {name: getattr(settings, f"AIRLOCK_RUN_{name}_S") for name in ("LEASE", "HEARTBEAT", "SWEEP")}
    kills = {"mid-call": kill_mid_call, "between steps": kill_between_steps, "after a decision": kill_after_decision}
    report: dict = {"started": datetime.now(UTC).isoformat(), "kills_per_place": args.kills, "settings": timings,
                    "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()}, "rounds": []}
    with ExitStack() as stack:
        stack.enter_context(worker())
        stack.enter_context(worker())
        stack.enter_context(beat())
        for n in range(args.kills):
            for place in PLACES:
                tag = f"k{n}{place[0]}"
                run_id, killed_at = kills[place](s, tag, stack)
                seconds = recovered_after(run_id, killed_at)
                outcome = settle(s, run_id, tag, 1 if place == "after a decision" else 3)
                report["rounds"].append({"place": place, "seconds": round(seconds, 2), "outcome": outcome})
                print(f"{place:>17}: taken over {seconds:5.1f} s after the kill; run {outcome}", flush=True)
    report["machine"]["load_after"] = os.getloadavg()
    report["table"] = table(report["rounds"], timings)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"recovery-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(report["table"])
    print(f"\nresults: {out.relative_to(ROOT)}")
    report["ok"] = all(r["outcome"] == "succeeded" for r in report["rounds"])
    return report


def table(rounds: list[dict], timings: dict) -> str:
    lines = [f"time from a SIGKILLed worker to another worker's takeover (lease {timings['LEASE']:g} s, heartbeat "
             f"{timings['HEARTBEAT']:g} s, sweep {timings['SWEEP']:g} s)",
             f"{'killed':<18} {'kills':>5} {'median s':>9} {'max s':>7}  exactly once"]
    for place in (*PLACES, "all"):
        picked = [r for r in rounds if place in ("all", r["place"])]
        seconds = [r["seconds"] for r in picked]
        once = all(r["outcome"] == "succeeded" for r in picked)
        lines.append(f"{place:<18} {len(seconds):>5} {statistics.median(seconds):>9.1f} {max(seconds):>7.1f}  "
                     f"{'yes' if once else 'NO'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
