"""Input tokens per crew run, Airlock against CrewAI, on the same pipeline and the same fake model.

    .venv/bin/python bench/tokens.py [--sizes 2,3,4,5,6,7,8] [--out FILE]

The pipeline (bench/pipeline.py): N agents in sequence, agent K looks up record #K with a tool that returns
2 KB (bench/payload.py) and builds on agent K-1's result. Both frameworks talk to one fake OpenAI-compatible
model (bench/fake_openai.py, a local HTTP server) that records every request body and says the same thing to
both: a call of the lookup tool, then the agent's conclusion. Every recorded request is counted with one
tokenizer (`o200k_base` from bpe-openai, run in CrewAI's venv: bench/crewai_side.py `count`), the same way
for both sides (bench/pipeline.input_tokens: messages and tool definitions).

- Airlock: a real crew run (`services.start_run` + `worker.drive_run`, the engine a worker runs) in a
  subprocess of the project's Python, embedded mode (SQLite in a temporary folder: the tokens a run sends do
  not depend on the database), the `bench` stdio MCP server (bench/lookup_server.py) and an `openai`
  connection whose base URL is the fake model (loopback, allowed for this process only by
  AIRLOCK_EGRESS_ALLOW). Task K names task K-1 as its context.
- CrewAI: `Crew(process=sequential)` in var/bench/crewai (bench/requirements-crewai.txt), its LLM pointed at
  the fake model, telemetry off. Its default: a task whose `context` is unset receives the output of every
  earlier task (the target rows); `context=[previous task]` is measured too (info).

bench/run.py `--only tokens` prints the rows; this script alone prints the same table.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "bench" / "crewai"
REQUIREMENTS = ROOT / "bench" / "requirements-crewai.txt"
SIZES = (2, 3, 4, 5, 6, 7, 8)
TARGET_AGENTS = 4
TARGET_RATIO = 0.5

sys.path.insert(0, str(ROOT))


# --- the peer's environment and the fake model -----------------------------------------------------------

def ensure_venv() -> Path:
    """var/bench/crewai with bench/requirements-crewai.txt installed (again when the file changes)."""
    python = VENV / "bin" / "python"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    marker = VENV / ".requirements.sha256"
    if python.exists() and marker.exists() and marker.read_text() == digest:
        return python
    print(f"setting up {VENV.relative_to(ROOT)} (CrewAI and bpe-openai) ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-r",
                    str(REQUIREMENTS)], check=True)
    marker.write_text(digest)
    return python


@contextmanager
def fake_model() -> Iterator[str]:
    """The fake model on a free loopback port; yields its base URL."""
    process = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fake_openai.py"), "--port", "0"],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = int(process.stdout.readline().strip())
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def take_recorded(base: str) -> list[dict]:
    """The request bodies the fake model received since the last call, and forget them."""
    import httpx2

    bodies = [r["body"] for r in httpx2.get(f"{base}/_recorded", timeout=30).raise_for_status().json()]
    httpx2.post(f"{base}/_reset", timeout=30).raise_for_status()
    return bodies


def _json_out(argv: list[str], *, env: dict | None = None, stdin: str | None = None) -> object:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, input=stdin)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[:3])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the two sides -------------------------------------------------------------------------------------

def crewai_run(python: Path, base: str, agents: int, context: str) -> list[dict]:
    take_recorded(base)
    _json_out([str(python), str(ROOT / "bench" / "crewai_side.py"), "run", "--base-url", f"{base}/v1",
               "--agents", str(agents), "--context", context],
              env={**os.environ, "CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true"})
    return take_recorded(base)


def airlock_runs(base: str, sizes: list[int]) -> dict[int, list[dict]]:
    """Every size's run in one subprocess (embedded mode in a temporary folder): {agents: request bodies}."""
    with tempfile.TemporaryDirectory(prefix="airlock-tokens-") as var:
        env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
        env.update({"AIRLOCK_VAR_DIR": var, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0",
                    "SECRET_KEY": "bench-only-" + "x" * 40, "AIRLOCK_EGRESS_ALLOW": "127.0.0.1",
                    "PYTHONPATH": str(ROOT)})
        out = _json_out([sys.executable, str(ROOT / "bench" / "tokens.py"), "airlock", "--base", base,
                         "--sizes", ",".join(map(str, sizes))], env=env)
    return {int(n): bodies for n, bodies in out.items()}


def _airlock_side(base: str, sizes: list[int]) -> dict[int, list[dict]]:
    """In the subprocess: set up an organisation, the lookup server, 8 agents and a crew per size; run each."""
    from cryptography.fernet import Fernet

    os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", Fernet.generate_key().decode())
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from apps.accounts import services as accounts
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.approvals.definition_changes import inbox
    from apps.crews import services as crews
    from apps.registry import services as registry
    from apps.runs import services as runs
    from apps.runs import worker
    from bench import pipeline

    user = accounts.ensure_user(email="bench@example.com", password="bench-password-123")
    org, _, _ = accounts.create_organization(name="Bench", owner_email=user.email)
    actor = member_actor(Membership.objects.select_related("user", "org").get(org=org, role="owner"))
    server = registry.create_server(actor=actor, name="bench", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "bench.lookup_server"], cwd=str(ROOT),
                                    sync=False)
    assert registry.sync_server(actor=actor, server_id=server.id, review=inbox).status == "ok"
    connection = agents.create_connection(actor=actor, name="Fake model", provider="openai", base_url=f"{base}/v1",
                                          api_key="fake-key", default_model="gpt-4o-mini")
    team = []
    for k in range(1, max(sizes) + 1):
        words = pipeline.agent(k)
        team.append(agents.create_agent(actor=actor, name=words["name"], connection_id=connection.id,
                                        instructions=f"{words['goal']} {words['backstory']}",
                                        grants=[{"tool": "bench.lookup", "policy": "auto"}]))
    out = {}
    for n in sizes:
        tasks = [{"name": f"step{k}", "agent_id": team[k - 1].id,
                  "description": f"{pipeline.task(k)} {pipeline.EXPECTED}",
                  "context": [f"step{k - 1}"] if k > 1 else []} for k in range(1, n + 1)]
        crew = crews.create_crew(actor=actor, name=f"Pipeline {n}", process="sequential", tasks=tasks,
                                 max_hops=n + 1)
        take_recorded(base)
        run = runs.start_run(actor=actor, crew_id=crew.id, inputs={}, enqueue=False)
        run = worker.drive_run(run_id=run.id, max_tasks=100)
        assert run.status == "succeeded", (run.status, run.error)
        out[n] = take_recorded(base)
    from apps.registry.pool import pool

    pool.close_all()
    return out


def count(python: Path, bodies: list[dict]) -> list[dict[str, int]]:
    """Each body's input tokens, in all and by part (bench/pipeline.input_tokens), in one tokenizer process."""
    return _json_out([str(python), str(ROOT / "bench" / "crewai_side.py"), "count"], stdin=json.dumps(bodies))


# --- the measurement and its rows -----------------------------------------------------------------------

SIDES = ("airlock", "crewai", "crewai_previous")


def measure(sizes: list[int] | tuple[int, ...] = SIZES) -> dict:
    """{side: {agents: {"requests", "tokens" (input tokens of the run), "parts" (by part)}}, and one request
    of each side as it was sent (the third agent's first: what it was handed)."""
    python = ensure_venv()
    sizes = sorted(set(sizes) | {TARGET_AGENTS})
    recorded: dict[str, dict[int, list[dict]]] = {"crewai": {}, "crewai_previous": {}}
    with fake_model() as base:
        recorded["airlock"] = airlock_runs(base, sizes)
        for n in sizes:
            recorded["crewai"][n] = crewai_run(python, base, n, "default")
            recorded["crewai_previous"][n] = crewai_run(python, base, n, "previous")
    runs = [(side, n, recorded[side][n]) for side in SIDES for n in sizes]
    counted = iter(count(python, [body for _, _, bodies in runs for body in bodies]))
    data: dict = {"tokenizer": "o200k_base (bpe-openai)", "sizes": sizes, **{side: {} for side in SIDES}}
    for side, n, bodies in runs:
        per = [next(counted) for _ in bodies]
        data[side][n] = {"requests": len(bodies), "tokens": sum(p["total"] for p in per),
                         "parts": {part: sum(p[part] for p in per) for part in per[0] if part != "total"}}
    data["third_agent_first_request"] = {side: recorded[side][TARGET_AGENTS][4] for side in SIDES}
    return data


def growth(side: dict, sizes: list[int]) -> list[int]:
    """Input tokens each added agent costs, from one size to the next (per agent, when sizes skip some)."""
    return [round((side[b]["tokens"] - side[a]["tokens"]) / (b - a)) for a, b in itertools.pairwise(sorted(sizes))]


PART_NAMES = {"system": "system prompts", "task": "task text", "context": "handed-on output",
              "tool_results": "tool results", "assistant": "the model's own turns",
              "tool_definitions": "tool definitions"}


def add_rows(table, data: dict) -> None:
    """The rows of bench/run.py's table (`table.add(metric, ours, theirs, target=, ok=, ...)`)."""
    ours, theirs, previous, sizes = data["airlock"], data["crewai"], data["crewai_previous"], data["sizes"]
    n = TARGET_AGENTS
    o, t = ours[n]["tokens"], theirs[n]["tokens"]
    table.add(f"tokens: input per run, {n} agents", o, t, target=f"ratio <= {TARGET_RATIO}", ok=o / t <= TARGET_RATIO,
              note="theirs: CrewAI's default (each task gets every earlier output)")
    table.add(f"tokens: input per run, {n} agents, context=prev", o, previous[n]["tokens"], target="info", ok=None,
              note="theirs: CrewAI with context=[previous task]")
    for part, name in PART_NAMES.items():
        table.add(f"  {n} agents: {name}", ours[n]["parts"][part], theirs[n]["parts"][part], target="info", ok=None)
    last = sizes[-1]
    table.add(f"tokens: input per run, {last} agents", ours[last]["tokens"], theirs[last]["tokens"], target="info",
              ok=None)
    ours_growth, theirs_growth = growth(ours, sizes), growth(theirs, sizes)
    for (a, b), mine, peer in zip(itertools.pairwise(sizes), ours_growth, theirs_growth, strict=True):
        table.add(f"tokens: added agent {a} -> {b}", mine, peer, target="info", ok=None)
    steady = ours_growth[-1] / ours_growth[0]
    table.add(f"tokens: added agent {sizes[-2]}->{last} / {sizes[0]}->{sizes[1]}", steady,
              theirs_growth[-1] / theirs_growth[0], compare=False, target="ours <= 1.05 (flat)", ok=steady <= 1.05,
              note="constant growth per agent: a later agent costs what an early one did")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="measure", choices=["measure", "airlock"])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--base", default="", help="airlock mode: the fake model's URL")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.mode == "airlock":
        print(json.dumps(_airlock_side(args.base, sizes)))
        return {}
    from bench.run import Table

    data = measure(sizes)
    table = Table()
    add_rows(table, data)
    print(table.render())
    print(f"load average {os.getloadavg()[0]:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps({**data, "table": table.rows}, indent=2))
    return data


if __name__ == "__main__":
    main()
