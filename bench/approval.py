"""Approval latency: a person's decision -> the approved call started at the MCP server, against LangGraph's server.

    .venv/bin/python bench/approval.py [--samples 20] [--out FILE] [--no-peer] [--no-embedded]

Measured in the same rounds, one sample of each path per round:

- **ours**: Airlock as deployed: a web process (uvicorn, `config.asgi`) and a warm, idle Celery worker (one
  child), on Postgres and Redis. A crew's one call (`stamp.record`, bench/stamp_server.py over stdio, granted
  `approve`) waits for a person; the person decides with `POST /api/v1/approvals/{id}/decision` (an approver's
  API token, a keep-alive connection, like a script or the inbox's button); the figure ends when the tool itself
  writes down that it started.
- **floor**: the same design's round trips and nothing else (bench/approval_floor.py): the decision's commit,
  one broker message to an idle worker blocked on the queue, its claim and `dispatched` commits.
- **theirs**: LangGraph's own server, `langgraph dev` (langgraph-cli[inmem], in var/bench/langgraph-server from
  bench/requirements-langgraph-server.txt), serving bench/langgraph_server/graph.py: an interrupted thread
  resumed with `POST /threads/{id}/runs/wait {"command": {"resume": "approve"}}`, to the tool's own stamp. Its
  in-memory queue looks for new runs every 0.5 s, so a resume waits 0.5-1.0 s depending on when it arrives:
  each resume is sent after a random pause (0-1 s, seeded), as a person's click arrives at any moment.
  LangGraph's Postgres-backed server runtime (`langgraph-runtime-postgres`) is not published on PyPI: it ships
  only inside LangChain's licensed Docker image (a LangSmith or LangGraph licence key checked at start), so it
  cannot run here; `report["postgres_runtime"]` says so.
- **embedded** (info): ours again with no DATABASE_URL / REDIS_URL (SQLite, the filesystem broker, the database
  channel layer: what `scripts/run` starts on a laptop), in a child process with its own var/ folder.

It makes its own Postgres database and Redis database and removes them afterwards (bench/scratch.py), prints
medians and p95s, and writes every sample to --out (default bench/results/approval-<timestamp>.json).
bench/run.py runs it for its `approval` rows. Not part of the test suite. docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import scratch, venvs  # noqa: E402
from bench.live import _free_port, _wait, process  # noqa: E402
from bench.stats import summary  # noqa: E402

PEER_VENV = scratch.WORK / "langgraph-server"
PEER_REQUIREMENTS = ROOT / "bench" / "requirements-langgraph-server.txt"
PEER_APP = ROOT / "bench" / "langgraph_server"
RESULTS = ROOT / "bench" / "results"
POSTGRES_RUNTIME = ("not run: LangGraph's Postgres runtime (`langgraph-runtime-postgres`) is not on PyPI; it ships "
                    "only in LangChain's Docker image, which checks a LangSmith / LangGraph licence key at start "
                    "(and there is no Docker engine or outside network here)")


# --- environments ----------------------------------------------------------------------------------------

def ensure_peer_venv() -> Path:
    """var/bench/langgraph-server with bench/requirements-langgraph-server.txt (again when the file changes)."""
    return venvs.ensure_venv(PEER_VENV, PEER_REQUIREMENTS, "langgraph-cli[inmem]")


def production_env() -> dict[str, str]:
    from cryptography.fernet import Fernet

    return {"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0", "SECRET_KEY": "bench-approval-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "0",
            "AIRLOCK_ENCRYPTION_KEY": os.environ.get("AIRLOCK_ENCRYPTION_KEY") or Fernet.generate_key().decode(),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def start_production_django(db_url: str, redis_url: str, channel_prefix: str) -> None:
    """This process as a production one on the scratch database and Redis database (its child processes inherit it)."""
    os.environ.update(production_env())
    os.environ.update({"DATABASE_URL": db_url, "REDIS_URL": redis_url, "AIRLOCK_CHANNEL_PREFIX": channel_prefix})
    start_django()


def start_django() -> None:
    os.chdir(ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- ours ------------------------------------------------------------------------------------------------

def setup(stamps: Path) -> dict:
    """An org, the stamp server over stdio, a crew whose one call waits for a person, an approver's token."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.approvals.definition_changes import inbox
    from apps.crews import services as crews
    from apps.registry import services as registry

    user = accounts.ensure_user(email="approval@example.com", password="approval-password-123")
    org, _, _ = accounts.create_organization(name="Approval", owner_email=user.email)
    owner = Membership.objects.select_related("user", "org").get(org=org, role="owner")
    from apps.accounts.actors import member_actor

    actor = member_actor(owner)
    server = registry.create_server(actor=actor, name="stamp", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "bench.stamp_server"], cwd=str(ROOT),
                                    env={"BENCH_STAMP_FILE": str(stamps)}, sync=False)
    report = registry.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agents.create_agent(actor=actor, name="Recorder", connection_id=connection.id,
                                script=[{"call": [{"tool": "stamp.record", "args": {"n": 1}}]},
                                        {"say": "Recorded.\nSTATUS: done\nREASON: approved"}],
                                grants=[{"tool": "stamp.record", "policy": "approve"}])
    crew = crews.create_crew(actor=actor, name="Held", process="sequential",
                             tasks=[{"name": "record", "agent_id": agent.id, "description": "Record it."}])
    _, approver = accounts.create_api_token(actor=None, org_id=org.id, name="approver", role="approver")
    return {"owner_id": owner.id, "crew": str(crew.id), "approver": approver}


def stamp_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for_stamp(path: Path, seen: int, timeout: float = 30) -> float:
    lines = _wait(lambda: (lambda got: got if len(got) > seen else None)(stamp_lines(path)), timeout,
                  "the approved call to start", interval=0.002)
    return float(lines[seen].split()[-1])


class Ours:
    """Airlock's web process and worker; one decision at a time, through the API."""

    def __init__(self, name: str, s: dict, stamps: Path) -> None:
        self.name, self.s, self.stamps = name, s, stamps

    def __enter__(self) -> Ours:
        import requests

        from bench.live import uvicorn_app, worker_argv

        self.port, web = uvicorn_app("config.asgi:application", f"{self.name}-web")
        self.web = web.__enter__()
        self.worker_cm = process(f"{self.name}-worker", worker_argv(f"{self.name}-{os.getpid()}", concurrency=1),
                                 ready="ready.")
        self.worker = self.worker_cm.__enter__()
        self._web_cm = web
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.s['approver']}"
        self.sample()  # warm: the worker's MCP session opens, imports load on both processes
        self.sample()
        return self

    def __exit__(self, *exc) -> None:
        self.worker_cm.__exit__(*exc)
        self._web_cm.__exit__(*exc)
        from apps.registry.pool import pool

        pool.close_all()

    def sample(self) -> dict:
        from apps.accounts.actors import member_actor
        from apps.accounts.models import Membership
        from apps.approvals.models import ApprovalRequest
        from apps.runs import services
        from apps.runs.models import Run, RunEvent, ToolCall

        actor = member_actor(Membership.objects.select_related("user", "org").get(id=self.s["owner_id"]))
        run = services.start_run(actor=actor, crew_id=self.s["crew"], inputs={})
        _wait(lambda: Run.objects.filter(id=run.id, status="waiting").exists(), 60, "the run to wait", interval=0.01)
        approval_id = ApprovalRequest.objects.values_list("id", flat=True).get(run_id=run.id, status="pending")
        seen = len(stamp_lines(self.stamps))
        time.sleep(0.05)  # the worker is idle again
        started = time.time()
        answer = self.http.post(f"http://127.0.0.1:{self.port}/api/v1/approvals/{approval_id}/decision",
                                json={"decision": "approve"}, timeout=30)
        answered = time.time()
        answer.raise_for_status()
        stamp = wait_for_stamp(self.stamps, seen)
        _wait(lambda: Run.objects.filter(id=run.id, status="succeeded").exists(), 60, "the run to end", interval=0.01)
        dispatched = ToolCall.objects.values_list("dispatched_at", flat=True).get(run_id=run.id)
        decided = ApprovalRequest.objects.values_list("decided_at", flat=True).get(id=approval_id)
        claimed = RunEvent.objects.values_list("at", flat=True).get(run_id=run.id, type="run.resumed")
        # the held run's first task, in the worker: from its claim to its park (the model call, the hold, the park)
        began, parked = (RunEvent.objects.values_list("at", flat=True).get(run_id=run.id, type=kind)
                         for kind in ("run.started", "run.waiting"))

        def since(at) -> float:
            return (at.timestamp() - started) * 1000

        # where the time goes: the vote written (before the commit), the worker's claim, `dispatched` committed
        return {"ms": (stamp - started) * 1000, "answer_ms": (answered - started) * 1000,
                "decided_ms": since(decided), "claimed_ms": since(claimed), "dispatched_ms": since(dispatched),
                "parked_ms": (parked - began).total_seconds() * 1000}


# --- theirs ----------------------------------------------------------------------------------------------

class LangGraphServer:
    """`langgraph dev` serving bench/langgraph_server/ from a scratch folder (it keeps its state in the folder)."""

    def __init__(self, python: Path) -> None:
        self.python = python
        self.random = random.Random(33)

    def __enter__(self) -> LangGraphServer:
        import requests

        self.folder = scratch.folder("langgraph-server-")
        for name in ("graph.py", "langgraph.json"):
            shutil.copy(PEER_APP / name, self.folder / name)
        self.stamps = self.folder / "stamps.txt"
        self.port = _free_port()
        env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1",
               "BENCH_STAMP_FILE": str(self.stamps)}
        for key in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH"):
            env.pop(key, None)
        log = (scratch.WORK / "logs" / "langgraph-server.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.proc = subprocess.Popen([str(self.python.parent / "langgraph"), "dev", "--host", "127.0.0.1",
                                          "--port", str(self.port), "--no-browser", "--no-reload"], cwd=self.folder,
                                         env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = requests.Session()

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"langgraph dev exited:\n{log.read_text()[-3000:]}")
            try:
                return self.http.get(f"{self.base}/ok", timeout=2).ok
            except requests.RequestException:
                return False

        _wait(up, 120, "langgraph dev to start", interval=0.2)
        self.sample()
        self.sample()
        return self

    def sample(self) -> dict:
        thread = self.http.post(f"{self.base}/threads", json={}, timeout=30).json()["thread_id"]
        paused = self.http.post(f"{self.base}/threads/{thread}/runs/wait", timeout=60, json={
            "assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}).json()
        assert "__interrupt__" in paused, paused
        seen = len(stamp_lines(self.stamps))
        time.sleep(self.random.uniform(0, 1))
        started = time.time()
        done = self.http.post(f"{self.base}/threads/{thread}/runs/wait", timeout=60, json={
            "assistant_id": "agent", "command": {"resume": "approve"}})
        answered = time.time()
        done.raise_for_status()
        stamp = wait_for_stamp(self.stamps, seen)
        assert done.json()["messages"][-1]["content"] == "5", done.json()
        return {"ms": (stamp - started) * 1000, "answer_ms": (answered - started) * 1000}

    def versions(self) -> dict:
        code = ("import json; from importlib.metadata import version as v; print(json.dumps({p: v(p) for p in "
                "('langgraph-cli', 'langgraph-api', 'langgraph-runtime-inmem', 'langgraph')}))")
        return json.loads(subprocess.run([str(self.python), "-c", code], capture_output=True, text=True,
                                         check=True).stdout)

    def __exit__(self, *exc) -> None:
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the runs --------------------------------------------------------------------------------------------

def measure_postgres(args) -> dict:
    """Ours, the floor and LangGraph's server, one sample of each per round, on a scratch database and Redis db."""
    from bench.approval_floor import Floor

    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock"
    if not url.startswith("postgres"):
        sys.exit("bench/approval.py needs Postgres (DATABASE_URL=postgres://...).")
    peer_python = None if args.no_peer else ensure_peer_venv()
    with scratch.database(url, "airlock_bench_approval") as db_url, \
            scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") as redis_url:
        start_production_django(db_url, redis_url, f"airlock-approval-{os.getpid()}")
        stamps = scratch.folder("approval-") / "stamps.txt"
        s = setup(stamps)
        out: dict = {"ours": [], "floor": [], "theirs": [], "postgres_runtime": POSTGRES_RUNTIME}
        peer = LangGraphServer(peer_python) if peer_python else None
        try:
            with Ours("approval", s, stamps) as ours, Floor(db_url, redis_url) as floor:
                if peer:
                    peer.__enter__()
                    out["versions"] = peer.versions()
                for index in range(args.samples):
                    out["ours"].append(ours.sample())
                    out["floor"].append(floor.sample())
                    if peer:
                        out["theirs"].append(peer.sample())
                    print(f"  round {index + 1}/{args.samples}: ours {out['ours'][-1]['ms']:.1f} ms, floor "
                          f"{out['floor'][-1]:.1f} ms" + (f", langgraph dev {out['theirs'][-1]['ms']:.0f} ms"
                                                          if peer else ""), flush=True)
        finally:
            if peer and hasattr(peer, "proc"):
                peer.__exit__(None, None, None)
            shutil.rmtree(stamps.parent, ignore_errors=True)
    return out


def measure_embedded(args) -> list[dict]:
    """Ours with no DATABASE_URL / REDIS_URL, in a child process with a var/ folder of its own."""
    folder = scratch.folder("approval-embedded-")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AIRLOCK_CHANNEL_PREFIX")}
    env.update(production_env())
    env["AIRLOCK_VAR_DIR"] = str(folder)
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--embedded-child", "--samples",
                               str(args.samples)], cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the embedded measurement failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def embedded_child(args) -> None:
    start_django()
    stamps = Path(os.environ["AIRLOCK_VAR_DIR"]) / "stamps.txt"
    s = setup(stamps)
    with Ours("approval-embedded", s, stamps) as ours:
        samples = [ours.sample() for _ in range(args.samples)]
    print(json.dumps(samples))


def table(report: dict) -> str:
    def row(name: str, values: list[float]) -> str:
        got = summary(values, digits=2)
        return f"{name:<58} {got.get('median', float('nan')):>9.1f} {got.get('p95', float('nan')):>9.1f}"

    lines = [f"{'decision -> approved call started (ms)':<58} {'median':>9} {'p95':>9}", "-" * 78,
             row("ours: POST decision -> the tool's own stamp", [x["ms"] for x in report["ours"]]),
             *(row(f"  {label}", [x[key] for x in report["ours"]]) for label, key in (
                 ("the POST answered", "answer_ms"),
                 ("the vote written (the web process, before its commit)", "decided_ms"),
                 ("the worker's claim (after the commit and the broker hop)", "claimed_ms"),
                 ("`dispatched` stamped (then the MCP hop to the tool)", "dispatched_ms"))),
             row("floor: decision commit, broker hop, claim + dispatched", report["floor"]),
             row("info: before it, the held run's task from its claim to its park", [x["parked_ms"]
                                                                                     for x in report["ours"]])]
    if report.get("theirs"):
        lines.append(row("LangGraph's server (langgraph dev): resume -> tool's stamp",
                         [x["ms"] for x in report["theirs"]]))
    if report.get("embedded"):
        lines.append(row("ours, embedded (SQLite, filesystem broker)", [x["ms"] for x in report["embedded"]]))
    lines.append(f"LangGraph's Postgres runtime: {report['postgres_runtime']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--out", default="")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's server")
    parser.add_argument("--no-embedded", action="store_true", help="skip the embedded mode")
    parser.add_argument("--embedded-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.embedded_child:
        embedded_child(args)
        return {}
    report: dict = {"started": datetime.now(UTC).isoformat(), "samples": args.samples,
                    "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()}}
    if not args.no_embedded:
        print("embedded mode ...", flush=True)
        report["embedded"] = measure_embedded(args)
    print("ours, the floor and LangGraph's server, in turn ...", flush=True)
    report |= measure_postgres(args)
    report["machine"]["load_after"] = os.getloadavg()
    report["summary"] = {
        "ours": summary([x["ms"] for x in report["ours"]], 2), "floor": summary(report["floor"], 2),
        "theirs": summary([x["ms"] for x in report["theirs"]], 2),
        "embedded": summary([x["ms"] for x in report.get("embedded", [])], 2)}
    out = Path(args.out) if args.out else RESULTS / f"approval-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(table(report))
    load = report["machine"]
    print(f"\nload average {load['load_before'][0]:.1f} before, {load['load_after'][0]:.1f} after; results: {out}")
    return report


if __name__ == "__main__":
    main()
