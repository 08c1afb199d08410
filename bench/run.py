"""Airlock's benchmark: one command, our numbers side by side with the peers', measured in the same run.

    .venv/bin/python bench/run.py [--quick] [--only NAME[,NAME]] [--passes N]

NAME: steps (per-step overhead and its flatness), bytes (stored per run), write (per-step overhead with a
write tool), fixed (start -> first model call), whole (a whole run's time at 5, 20, 100 steps), written (WAL
bytes written per run), floor (a Postgres commit and a bare MCP call, against our step), embedded (ours on
SQLite with no Redis: per step and approval), approval (decision -> approved call started), events (commit ->
websocket frame, burst, publish cost), gateway (bench/gateway.py: against mcp-proxy and ContextForge,
installed under var/bench/peers/; bench/gateway_held.py: idle CPU while holding host sessions), history
(bench/history.py), pages (bench/pages.py: page loads at 10,000 runs), memory (worker RSS), tokens
(bench/tokens.py: input tokens per crew run against CrewAI, in its own
var/bench/crewai), load (bench/load.py: 200 runs at once with 100 pages watching, a 500-approval storm, on a
compose-like stack), scale (bench/scale.py: throughput with 1 and 2 worker and web processes, 10,000 runs parked
waiting for a person).
`--quick` is a smoke mode (small sizes, few passes).

It builds its own environment for the comparisons (var/bench/venv with bench/requirements.txt: LangGraph +
langgraph-checkpoint-postgres; the comparison runs there as a subprocess printing JSON), creates its own
databases on DATABASE_URL's server (`airlock_bench_run_<pid>_<time>` for us, `airlock_bench_langgraph_...` for
LangGraph) and takes an empty Redis database of REDIS_URL's server (bench/scratch.py); at the end it drops and
flushes only those, never a database it did not create. It prints one table:
metric, ours, theirs, ratio, target, pass/fail. Each figure is the median of its samples (all steps of
all passes, or one sample per pass), with min and p95 in the JSON written to bench/results/<timestamp>.json.
The machine is shared and noisy: absolute numbers drift between runs, the ratios (both sides measured
in the same run, alternating) are what the targets are about. Not part of the test suite. docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "bench" / "venv"
REQUIREMENTS = ROOT / "bench" / "requirements.txt"
RESULTS = ROOT / "bench" / "results"
METRICS = ("steps", "bytes", "write", "fixed", "whole", "written", "floor", "approval", "embedded", "events",
           "gateway", "history", "pages", "memory", "tokens", "load", "scale")
RUN_SIZES = [5, 20, 100]  # the fixed, whole and written sections

sys.path.insert(0, str(ROOT))

from bench import scratch, venvs  # noqa: E402
from bench.stats import quantile, summary  # noqa: E402

# --- environment -----------------------------------------------------------------------------------------

def ensure_venv() -> Path:
    """var/bench/venv with bench/requirements.txt installed (again when the file changes)."""
    return venvs.ensure_venv(VENV, REQUIREMENTS, "LangGraph and its Postgres checkpointer")


def admin_database_url() -> str:
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock"
    if not url.startswith("postgres"):
        sys.exit("bench/run.py needs Postgres (DATABASE_URL=postgres://...): the comparison is about Postgres.")
    return url


def configure(ours_url: str, redis_url: str) -> None:
    """Settings for this process and the worker/web processes it starts: production-like (DEBUG off)."""
    from cryptography.fernet import Fernet

    os.environ.update({
        "DATABASE_URL": ours_url, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "0", "SECRET_KEY": "bench-only-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0", "AIRLOCK_CHANNEL_PREFIX": "airlock-bench",
        # A 100-step run calls its one tool 100 times: the per-run cap (20 by default) is still checked
        # every call, above what the longest run needs.
        "AIRLOCK_RUN_CALLS_PER_TOOL": "1000",
    })
    os.environ.setdefault("AIRLOCK_ENCRYPTION_KEY", Fernet.generate_key().decode())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.chdir(ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def theirs(python: Path, db: str, mode: str, **options) -> dict:
    argv = [str(python), str(ROOT / "bench" / "langgraph_side.py"), mode, "--db", db]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"langgraph_side {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def merge(into: dict, part: dict) -> None:
    """Adds one pass's samples (step_ms, run_ms, first_ms, bytes, wal_bytes, ... per size) to `into`."""
    for size, values in part["sizes"].items():
        slot = into.setdefault("sizes", {}).setdefault(size, {"step_ms": [], "run_ms": [], "bytes": []})
        for key, samples in values.items():
            slot.setdefault(key, []).extend(samples)
    if "bytes" in part:
        into.setdefault("bytes", {"per_run": []})["per_run"] += part["bytes"]["per_run"]
        into["bytes"]["rows"] = part["bytes"]["rows"]


# --- the table -------------------------------------------------------------------------------------------

class Table:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, metric: str, ours, theirs=None, *, target: str, ok: bool | None, unit: str = "",
            ratio: float | None = None, note: str = "", compare: bool = True) -> None:
        if compare and ratio is None and isinstance(ours, int | float) and isinstance(theirs, int | float) and theirs:
            ratio = ours / theirs
        self.rows.append({"metric": metric, "ours": ours, "theirs": theirs, "ratio": ratio, "target": target,
                          "pass": ok, "unit": unit, "note": note})

    @staticmethod
    def _fmt(value, unit: str) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.2f}{unit}" if abs(value) < 1000 else f"{value:,.0f}{unit}"
        if isinstance(value, int):
            return f"{value:,}{unit}"
        return str(value)

    def render(self) -> str:
        head = f"{'metric':<46} {'ours':>14} {'theirs':>14} {'ratio':>7}  {'target':<18} result"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            result = {True: "PASS", False: "FAIL", None: "info"}[r["pass"]]
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(f"{r['metric']:<46} {self._fmt(r['ours'], r['unit']):>14} "
                         f"{self._fmt(r['theirs'], r['unit']):>14} {ratio:>7}  {r['target']:<18} {result}")
        return "\n".join(lines)


# --- the metrics -----------------------------------------------------------------------------------------

def run_steps(args, python, theirs_db, setup, report, table) -> None:
    """Per-step overhead: the target rows compare our step (scripted model, the `bench.lookup` MCP tool over
    stdio, each step committed) with LangGraph's (`create_react_agent` + PostgresSaver, durability="sync",
    an in-process `lookup` tool). Info rows show where the difference comes from, measured in the same
    rounds: LangGraph calling the same stdio MCP server through langchain-mcp-adapters on one session kept
    open (`--tool mcp`, 20 steps); each step minus the time spent inside its tool call (ours: the engine's
    pool call, from its start to its answer, which for a read overlaps the commit's round trip; theirs: the
    tool function, or the adapter call), median over all steps; and the tool call
    alone, MCP on both sides. Their samples: report["steps"]["samples_20"]."""
    from bench import engine

    sizes = [5, 20] if args.quick else [5, 20, 100]
    passes = args.passes or (2 if args.quick else 5)
    # One pass of each side per round (theirs, theirs over MCP, ours), as many rounds as passes: the speed of
    # these machines drifts by tens of percent from one minute to the next (two full runs an hour apart on
    # 1 December gave ratios of 1.31 and 1.92), so both sides must share the same minutes.
    rounds, passes = passes, 1
    # the info rows: LangGraph with the same stdio MCP tool (20 steps), and each step minus its tool call
    parts = ("tool_ms", "net_ms")
    ours_data, theirs_data, theirs_mcp, split = {}, {}, {}, {}

    def keep(side: str, part: dict) -> dict:  # merge() keeps step/run/bytes; the tool split is kept here
        for size, values in part["sizes"].items():
            for key in parts:
                split.setdefault(side, {}).setdefault(size, {k: [] for k in parts})[key] += values[key]
        return part

    for _ in range(rounds):
        merge(theirs_data, keep("theirs", theirs(python, theirs_db, "steps", sizes=",".join(map(str, sizes)),
                                                 passes=passes, bytes_size=20)))
        merge(theirs_mcp, keep("theirs_mcp", theirs(python, theirs_db, "steps", sizes="20", passes=passes,
                                                    bytes_size=0, tool="mcp", server_python=sys.executable)))
        merge(ours_data, keep("ours", engine.steps(setup, sizes, passes, 20)))

    def sizes_summary(side: str, data: dict) -> dict:
        return {k: {"step_ms": summary(v["step_ms"]), "run_ms": summary(v["run_ms"]),
                    **{key: summary(split[side][k][key]) for key in parts}} for k, v in data["sizes"].items()}

    report["steps"] = {"ours": sizes_summary("ours", ours_data), "theirs": sizes_summary("theirs", theirs_data),
                       "theirs_mcp": sizes_summary("theirs_mcp", theirs_mcp),
                       "samples_20": {side: {"step_ms": data["sizes"]["20"]["step_ms"], **split[side]["20"]}
                                      for side, data in (("ours", ours_data), ("theirs", theirs_data),
                                                         ("theirs_mcp", theirs_mcp))},
                       "tool": "bench.lookup over stdio MCP, session warm in this process's pool",
                       "theirs_tool": "lookup: an in-process @tool function (the target rows)",
                       "theirs_mcp_tool": "bench/lookup_server.py over stdio MCP via langchain-mcp-adapters, one "
                                          "ClientSession kept open (info rows)"}
    o20, t20 = ours_data["sizes"]["20"]["step_ms"], theirs_data["sizes"]["20"]["step_ms"]
    om, tm = statistics.median(o20), statistics.median(t20)
    op, tp = quantile(o20, 0.95), quantile(t20, 0.95)
    table.add("per-step overhead, 20 steps (median)", om, tm, unit=" ms", target="ratio <= 0.75",
              ok=om / tm <= 0.75)
    table.add("per-step overhead, 20 steps (p95)", op, tp, unit=" ms", target="ratio <= 1.0", ok=op / tp <= 1.0)
    # info: where the difference comes from (theirs_mcp: the same stdio MCP server as ours, one session)
    mcp20 = split["theirs_mcp"]["20"]
    table.add("same MCP tool on both sides, 20 steps (median)", om,
              statistics.median(theirs_mcp["sizes"]["20"]["step_ms"]), unit=" ms", target="info", ok=None,
              note="theirs: bench/lookup_server.py via langchain-mcp-adapters, one session")
    on = statistics.median(split["ours"]["20"]["net_ms"])
    table.add("step minus its tool call, 20 steps (median)", on, statistics.median(split["theirs"]["20"]["net_ms"]),
              unit=" ms", target="info", ok=None, note="per step: interval - time inside the tool call; "
              "theirs: in-process tool")
    table.add("step minus its tool call, MCP both (median)", on, statistics.median(mcp20["net_ms"]), unit=" ms",
              target="info", ok=None, note="theirs: the MCP runs, minus the adapter call")
    table.add("tool call alone, MCP both sides, 20 (median)", statistics.median(split["ours"]["20"]["tool_ms"]),
              statistics.median(mcp20["tool_ms"]), unit=" ms", target="info", ok=None,
              note="ours: apps.runs.engine.tools.call_tool; theirs: the adapter tool's coroutine")
    for size in sizes:
        if str(size) != "20":
            o, t = (statistics.median(d["sizes"][str(size)]["step_ms"]) for d in (ours_data, theirs_data))
            table.add(f"per-step overhead, {size} steps (median)", o, t, unit=" ms", target="info", ok=None)
    first, last = str(min(sizes)), str(max(sizes))
    flat = statistics.median(ours_data["sizes"][last]["step_ms"]) / statistics.median(
        ours_data["sizes"][first]["step_ms"])
    flat_theirs = statistics.median(theirs_data["sizes"][last]["step_ms"]) / statistics.median(
        theirs_data["sizes"][first]["step_ms"])
    table.add(f"per-step flatness ({last} vs {first} steps)", flat, flat_theirs, compare=False,
              target="ours <= 1.25", ok=flat <= 1.25)
    report["_bytes"] = report["_runs"] = (ours_data, theirs_data)


def run_bytes(args, python, theirs_db, setup, report, table) -> None:
    from bench import engine

    if "_bytes" not in report:  # --only bytes: just the 5- and 20-step runs
        ours_data, theirs_data = {}, {}
        merge(theirs_data, theirs(python, theirs_db, "steps", sizes="5,20", passes=2, bytes_size=20))
        merge(ours_data, engine.steps(setup, [5, 20], 2, 20))
        report["_bytes"] = (ours_data, theirs_data)
    ours_data, theirs_data = report.pop("_bytes")
    o, t = statistics.median(ours_data["bytes"]["per_run"]), statistics.median(theirs_data["bytes"]["per_run"])
    by_size = {side: {k: int(statistics.median(v["bytes"])) for k, v in data["sizes"].items() if v["bytes"]}
               for side, data in (("ours", ours_data), ("theirs", theirs_data))}
    report["bytes"] = {"ours": {**summary(ours_data["bytes"]["per_run"]), "rows": ours_data["bytes"]["rows"]},
                       "theirs": {**summary(theirs_data["bytes"]["per_run"]), "rows": theirs_data["bytes"]["rows"]},
                       "by_size": by_size}
    table.add("bytes stored per run (20 steps, 2 KB results)", int(o), int(t), target="ratio <= 0.1",
              ok=o / t <= 0.1)
    sizes = sorted(by_size["ours"], key=int)
    for side in ("ours", "theirs"):
        per = [(by_size[side][b] - by_size[side][a]) / (int(b) - int(a)) for a, b in itertools.pairwise(sizes)]
        report["bytes"][f"{side}_per_step"] = [int(x) for x in per]
    ours_per, theirs_per = report["bytes"]["ours_per_step"], report["bytes"]["theirs_per_step"]
    table.add(f"bytes per added step ({'-'.join(sizes)} steps)", int(ours_per[-1]), int(theirs_per[-1]),
              target="info", ok=None)
    growth = ours_per[-1] / ours_per[0]
    table.add("bytes per step: later steps / earlier", growth, theirs_per[-1] / theirs_per[0], compare=False,
              target="ours 0.9-1.1", ok=0.9 <= growth <= 1.1)


def median_of(data: dict, size: int, key: str) -> float:
    return statistics.median(data["sizes"][str(size)][key])


def rounds_of(args) -> int:
    return args.passes or (2 if args.quick else 5)


def side_runs(args, python, theirs_db, setup, report) -> tuple[dict, dict]:
    """(ours, theirs): runs of 5, 20 and 100 steps with the read tool, one of each size per side per round,
    the sides in turn. The steps section's when it ran these sizes (its full size), else measured here once
    for the fixed, whole and written sections."""
    from bench import engine

    runs = report.get("_runs")
    if runs and all(str(n) in runs[0]["sizes"] for n in RUN_SIZES):
        return runs
    ours_data, theirs_data = {}, {}
    for _ in range(rounds_of(args)):
        merge(theirs_data, theirs(python, theirs_db, "steps", sizes=",".join(map(str, RUN_SIZES)), passes=1,
                                  bytes_size=0))
        merge(ours_data, engine.steps(setup, RUN_SIZES, 1, 0))
    report["_runs"] = (ours_data, theirs_data)
    return ours_data, theirs_data


def run_write(args, python, theirs_db, setup, report, table) -> None:
    """Per-step overhead with a write tool: ours calls `bench.record` (risk write, policy auto: `dispatched` is
    committed before the call leaves, no early path) on the same stdio server; theirs an in-process `record`
    tool, which LangGraph runs as any other tool. Our read step is measured in the same rounds (the note)."""
    from bench import engine

    ours_data, theirs_data, ours_read = {}, {}, {}
    for _ in range(rounds_of(args)):
        merge(theirs_data, theirs(python, theirs_db, "steps", sizes="20", passes=1, bytes_size=0, tool="record"))
        merge(ours_data, engine.steps(setup, [20], 1, 0, tool="record"))
        merge(ours_read, engine.steps(setup, [20], 1, 0))
    o, t, read = (median_of(d, 20, "step_ms") for d in (ours_data, theirs_data, ours_read))
    report["write"] = {"ours": summary(ours_data["sizes"]["20"]["step_ms"]),
                       "theirs": summary(theirs_data["sizes"]["20"]["step_ms"]),
                       "ours_read": summary(ours_read["sizes"]["20"]["step_ms"]),
                       "tool": "bench.record over stdio MCP (risk write, policy auto)",
                       "theirs_tool": "record: an in-process @tool function storing into a dict"}
    table.add("per-step overhead, write tool, 20 steps (median)", o, t, unit=" ms", target="info", ok=None,
              note=f"LangGraph has no separate write path; ours, read tool, same rounds: {read:.2f} ms")


def run_fixed(args, python, theirs_db, setup, report, table) -> None:
    """What a run costs before its first step: ours from `start_run` to the first model request the scripted
    model sees (the run row, its claim, the crew's task, the conversation's start); theirs from `invoke` to
    the first model call (the first node). All run sizes pooled."""
    ours_data, theirs_data = side_runs(args, python, theirs_db, setup, report)
    ours, theirs_ = ([x for n in RUN_SIZES for x in d["sizes"][str(n)]["first_ms"]] for d in (ours_data, theirs_data))
    report["fixed"] = {"ours": summary(ours), "theirs": summary(theirs_)}
    table.add("fixed cost per run: start -> first model call", statistics.median(ours), statistics.median(theirs_),
              unit=" ms", target="info", ok=None, note="ours: start_run -> scripted model; theirs: invoke -> "
              "first node")


def tail_ms(data: dict, n: int) -> list[float]:
    """Per run of n steps: the time from its last model call to its end (run_ms - first_ms - its n steps)."""
    slot = data["sizes"][str(n)]
    return [total - first - sum(slot["step_ms"][i * n:(i + 1) * n])
            for i, (total, first) in enumerate(zip(slot["run_ms"], slot["first_ms"], strict=True))]


def run_whole(args, python, theirs_db, setup, report, table) -> None:
    """A whole run's time, start to its end (ours: `start_run` + `drive_run`; theirs: `invoke`), per size; the
    JSON splits it into start -> first model call, the steps, and last model call -> end (`tail`)."""
    ours_data, theirs_data = side_runs(args, python, theirs_db, setup, report)
    report["whole"] = {side: {str(n): {"run_ms": summary(d["sizes"][str(n)]["run_ms"]),
                                       "first_ms": summary(d["sizes"][str(n)]["first_ms"]),
                                       "tail_ms": summary(tail_ms(d, n))} for n in RUN_SIZES}
                       for side, d in (("ours", ours_data), ("theirs", theirs_data))}
    for n in RUN_SIZES:
        o, t = median_of(ours_data, n, "run_ms"), median_of(theirs_data, n, "run_ms")
        ends = ", ".join(f"{side} {report['whole'][side][str(n)]['first_ms']['median']:.0f} + "
                         f"{report['whole'][side][str(n)]['tail_ms']['median']:.0f} ms" for side in ("ours", "theirs"))
        table.add(f"whole run, {n} steps (median)", o, t, unit=" ms",
                  target="ratio <= 0.75" if n == 5 else "info", ok=o / t <= 0.75 if n == 5 else None,
                  note=f"before the first and after the last model call: {ends}")


def run_written(args, python, theirs_db, setup, report, table) -> None:
    """Bytes written per run, not only those kept: the WAL Postgres wrote during the run (pg_wal_lsn_diff of
    pg_current_wal_lsn() before and after). WAL is server-wide: each side runs while the other is idle, but
    anything else on the server (other sessions, autovacuum, a checkpoint's full-page writes) counts too, so
    the figure is the median over the rounds. The database's growth (pg_database_size) is an info row; the
    JSON has which of our tables one 100-step run made grow."""
    from bench import engine

    ours_data, theirs_data = side_runs(args, python, theirs_db, setup, report)
    report["written"] = {side: {str(n): {"wal_bytes": summary(d["sizes"][str(n)]["wal_bytes"]),
                                         "grown_bytes": summary(d["sizes"][str(n)]["grown_bytes"])}
                                for n in (20, 100)} for side, d in (("ours", ours_data), ("theirs", theirs_data))}
    report["written"]["ours_growth_by_table_100"] = engine.growth_by_table(setup, 100)  # where the bytes go
    o, t = (median_of(d, 20, "wal_bytes") for d in (ours_data, theirs_data))
    table.add("bytes written per run (WAL, 20 steps)", int(o), int(t), target="ratio <= 0.1", ok=o / t <= 0.1,
              note=f"server-wide WAL, other side idle, median of {len(ours_data['sizes']['20']['wal_bytes'])}")
    og, tg = (median_of(d, 20, "grown_bytes") for d in (ours_data, theirs_data))
    table.add("  database growth per run (20 steps)", int(og), int(tg), target="info", ok=None,
              note="pg_database_size after - before (whole pages)")
    per_step = {side: (median_of(d, 100, "wal_bytes") / 100) / (median_of(d, 20, "wal_bytes") / 20)
                for side, d in (("ours", ours_data), ("theirs", theirs_data))}
    table.add("written bytes per step, 100 vs 20 steps", per_step["ours"], per_step["theirs"], compare=False,
              target="constant (<= 1.25)", ok=per_step["ours"] <= 1.25)


def floor_samples(db_url: str, samples: int) -> dict[str, list[float]]:
    """The floor of a read step, bare: one Postgres commit round trip (an INSERT committed on its own, psycopg)
    and one MCP `tools/call` to bench/lookup_server.py (the MCP SDK's client, stdio, one session kept open),
    each alone, both at once (asyncio.gather: a read's commit and call overlap in our engine) and in turn. ms."""
    return asyncio.run(_floor_samples(db_url, samples))


async def _floor_samples(db_url: str, samples: int) -> dict[str, list[float]]:
    import psycopg
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "bench.lookup_server"], cwd=str(ROOT))
    out: dict[str, list[float]] = {"commit": [], "call": [], "overlapped": [], "in_turn": []}
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn, \
            Client(params, read_timeout_seconds=60) as client:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_floor_commit (id bigserial PRIMARY KEY, body text)")

        async def commit() -> None:
            await conn.execute("INSERT INTO bench_floor_commit (body) VALUES (%s)", ("step",))

        async def call() -> None:
            result = await client.call_tool("lookup", {"n": 1})
            assert not result.is_error, result

        async def both() -> None:
            await asyncio.gather(commit(), call())

        async def in_turn() -> None:
            await commit()
            await call()

        kinds = {"commit": commit, "call": call, "overlapped": both, "in_turn": in_turn}
        for index in range(samples + 3):  # three warm-up rounds
            for kind, work in kinds.items():
                started = time.perf_counter()
                await work()
                if index >= 3:
                    out[kind].append((time.perf_counter() - started) * 1000)
    return out


def run_floor(args, setup, ours_db: str, report, table) -> None:
    """Our read step against the floor under it, in the same rounds: a 20-step run of ours, then the floor's
    samples (floor_samples), each round."""
    from bench import engine

    ours_data, floor = {}, {"commit": [], "call": [], "overlapped": [], "in_turn": []}
    for _ in range(rounds_of(args)):
        merge(ours_data, engine.steps(setup, [20], 1, 0))
        for kind, values in floor_samples(ours_db, 10 if args.quick else 20).items():
            floor[kind] += values
    step = median_of(ours_data, 20, "step_ms")
    report["floor"] = {"ours_step": summary(ours_data["sizes"]["20"]["step_ms"]),
                       **{kind: summary(values) for kind, values in floor.items()}}
    commit, call, both, in_turn = (statistics.median(floor[k]) for k in ("commit", "call", "overlapped", "in_turn"))
    table.add("floor: Postgres commit round trip (median)", commit, unit=" ms", target="info", ok=None,
              note="INSERT, autocommit, psycopg, on a table of the bench database")
    table.add("floor: bare MCP stdio call (median)", call, unit=" ms", target="info", ok=None,
              note="MCP SDK client, one session kept open, lookup(n)")
    table.add("floor: commit and call overlapped (median)", both, unit=" ms", target="info", ok=None,
              note="asyncio.gather of the two")
    table.add("floor: commit and call in turn (median)", in_turn, unit=" ms", target="info", ok=None)
    table.add("our step ÷ floor (overlapped)", step, both, unit=" ms", target="<= 2.0", ok=step / both <= 2.0,
              note="ours: read step, 20 steps, same rounds")


def embedded_steps(passes: int) -> None:
    """In a child process with no DATABASE_URL / REDIS_URL: our 20-step runs on SQLite, printed as JSON."""
    os.chdir(ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from bench import engine

    setup = engine.setup([20])
    data = engine.steps(setup, [20], passes, 0)["sizes"]["20"]
    from apps.registry.pool import pool

    pool.close_all()
    print(json.dumps({"step_ms": data["step_ms"], "run_ms": data["run_ms"]}))


def embedded_env(folder: Path) -> dict[str, str]:
    """This process's settings without Postgres and Redis: the embedded mode, its var/ folder `folder`."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AIRLOCK_CHANNEL_PREFIX")}
    return {**env, "AIRLOCK_VAR_DIR": str(folder)}


def run_embedded(args, setup, report, table) -> None:
    """Ours with no DATABASE_URL / REDIS_URL (SQLite, the filesystem broker, the in-memory channel layer), as
    `scripts/run` starts it on a laptop: per step (a child process with a var/ folder of its own, against ours
    on Postgres in this process right after) and approval latency (bench/approval.py's embedded measurement,
    or the approval section's when it ran)."""
    from bench import engine

    passes = rounds_of(args)
    folder = scratch.folder("run-embedded-")
    try:
        code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.run import embedded_steps; " \
               f"embedded_steps({passes})"
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=embedded_env(folder), capture_output=True,
                              text=True)
        if done.returncode:
            raise RuntimeError(f"embedded steps failed:\n{done.stderr[-3000:]}")
        steps = json.loads(done.stdout.strip().splitlines()[-1])["step_ms"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    on_postgres = engine.steps(setup, [20], passes, 0)["sizes"]["20"]["step_ms"]
    approval = report.get("approval", {}).get("summary", {}).get("embedded", {})
    if not approval.get("n"):
        from bench.approval import measure_embedded

        approval = summary([x["ms"] for x in measure_embedded(argparse.Namespace(samples=5 if args.quick else 20))])
    report["embedded"] = {"step_ms": summary(steps), "postgres_step_ms": summary(on_postgres), "approval_ms": approval}
    table.add("embedded: per-step overhead, 20 steps (median)", statistics.median(steps),
              statistics.median(on_postgres), unit=" ms", target="info", ok=None,
              note="theirs = ours on Postgres + Redis, right after")
    table.add("embedded: approval decision -> call started", approval["median"], unit=" ms", target="info",
              ok=None, note="bench/approval.py, SQLite + filesystem broker")


def run_approval(args, python, theirs_db, admin_url, report, table) -> None:
    """bench/approval.py (its own database, Redis db, web process, worker and LangGraph's server): a decision
    POSTed to the web process -> the approved call started at the MCP server, against LangGraph's server and the
    bare floor of the same design; LangGraph's in-process resume and the embedded mode as info rows."""
    samples = args.passes or (5 if args.quick else 20)
    out = ROOT / "var" / "bench" / "approval-run.json"
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.approval import main; "
            f"main(['--samples', '{samples}', '--out', {str(out)!r}])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "DATABASE_URL": admin_url},
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench.approval failed:\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    inprocess = theirs(python, theirs_db, "resume", passes=samples)["resume_ms"]
    report["approval"] = {**data, "theirs_in_process": summary(inprocess)}
    ours, dev, floor = (data["summary"][k]["median"] for k in ("ours", "theirs", "floor"))
    table.add("approval: decision POST -> call started", ours, dev, unit=" ms", target="ratio <= 0.1",
              ok=ours / dev <= 0.1, note="theirs: LangGraph's server (langgraph dev), resume -> tool")
    table.add("approval: against our design's bare floor", ours, floor, unit=" ms", target="ratio <= 2.0",
              ok=ours / floor <= 2.0, note="floor: decision commit, broker hop, claim + dispatched commits")
    table.add("  LangGraph in process (Command(resume))", ours, statistics.median(inprocess), unit=" ms",
              target="info", ok=None, note="no process hop, no server: a different job")
    if data["summary"]["embedded"].get("n"):
        table.add("  ours embedded (SQLite, filesystem broker)", data["summary"]["embedded"]["median"], ours,
                  unit=" ms", target="info", ok=None, note="theirs = ours on Postgres + Redis")


def run_events(args, setup, report, table) -> None:
    from bench import live

    samples = 30 if args.quick else 200
    data = live.events(setup, samples=samples, burst=500)
    report["events"] = {"layer": data["layer"], "ours_ms": summary(data["event_ms"]),
                        "floor_ms": summary(data["floor_ms"]), "publish_ms": summary(data["publish_ms"]),
                        "burst": data["burst"], "samples": {"ours_ms": data["event_ms"], "floor_ms": data["floor_ms"]}}
    op, fp = quantile(data["event_ms"], 0.95), quantile(data["floor_ms"], 0.95)
    table.add("run event commit -> websocket frame (p95)", op, fp, unit=" ms", target="<= 1.5x floor",
              ok=op / fp <= 1.5, note="theirs = bare group_send -> frame")
    table.add("run event commit -> websocket frame (median)", statistics.median(data["event_ms"]),
              statistics.median(data["floor_ms"]), unit=" ms", target="info", ok=None)
    burst = data["burst"]
    table.add("500-event burst: received complete, in order", f"{burst['received']}/{burst['events']}",
              target="all, in order", ok=burst["complete"] and burst["in_order"] and not burst["duplicates"])
    pub = quantile(data["publish_ms"], 0.95)
    table.add("publish cost on the worker's path (p95)", pub, unit=" ms", target="<= 0.8 ms", ok=pub <= 0.8)


def run_gateway(args, admin_url, report, table) -> None:
    """bench/gateway.py: Airlock's gateway against mcp-proxy and ContextForge on the same stdio server."""
    out = ROOT / "var" / "bench" / "gateway-run.json"
    size = ["--calls", "100", "--seconds", "2", "--rounds", "1"] if args.quick else []
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.gateway import main; "
            f"main({[*size, '--out', str(out)]!r})")
    env = {**os.environ, "DATABASE_URL": admin_url, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench.gateway failed:\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    report["gateway"] = data
    gateway_rows(data, table)
    held_out = ROOT / "var" / "bench" / "gateway-held-run.json"
    held = ["--held", "0,100", "--seconds", "3"] if args.quick else ["--held", "0,1000", "--seconds", "10"]
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.gateway_held import main; "
            f"main({[*held, '--out', str(held_out)]!r})")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench.gateway_held failed:\n{done.stderr[-3000:]}")
    report["gateway_held"] = json.loads(held_out.read_text())
    idle, most = report["gateway_held"]["rows"][0], report["gateway_held"]["rows"][-1]
    cpu = {row["held"]: sum(row["cpu_ms_per_s"].values()) for row in (idle, most)}
    table.add(f"gateway idle CPU per second, {most['held']:,} held sessions vs none", cpu[most["held"]],
              cpu[idle["held"]], unit=" ms", target="info", ok=None,
              note="the gateway's processes and its Postgres backends, no calls (bench/gateway_held.py)")


def gateway_rows(data: dict, table) -> None:
    lat, thr, targets = data["latency"], data["throughput"], data["targets"]
    ours, proxy, forge = lat["airlock"], lat["mcp_proxy"], lat["contextforge"]
    table.add("gateway tools/call p50 vs mcp-proxy", ours["p50_ms"], proxy["p50_ms"], unit=" ms",
              target="ratio <= 1.0", ok=targets["p50_vs_mcp_proxy"]["ok"], note="one session, same stdio server")
    table.add("gateway tools/call p50 vs ContextForge", ours["p50_ms"], forge["p50_ms"], unit=" ms",
              target="ratio <= 0.1", ok=targets["p50_vs_contextforge"]["ok"],
              note=f"ContextForge {data['versions'].get('contextforge', '?')}")
    ours50, proxy50 = thr["airlock"]["50"], thr["mcp_proxy"]["50"]
    table.add("gateway calls/s, 50 sessions vs mcp-proxy", ours50["calls_per_s"], proxy50["calls_per_s"],
              target="ratio >= 1.5", ok=targets["calls_per_s_50_vs_mcp_proxy"]["ok"],
              note=f"errors: ours {ours50['errors']}, theirs {proxy50['errors']}")
    table.add("  p95 vs mcp-proxy", ours["p95_ms"], proxy["p95_ms"], unit=" ms", target="info", ok=None)
    for n in ("1", "10"):
        table.add(f"  calls/s, {n} session{'s' if n != '1' else ''} vs mcp-proxy", thr["airlock"][n]["calls_per_s"],
                  thr["mcp_proxy"][n]["calls_per_s"], target="info", ok=None)
    table.add("  calls/s, 50 sessions vs ContextForge", ours50["calls_per_s"],
              thr["contextforge"]["50"]["calls_per_s"], target="info", ok=None,
              note=f"errors: theirs {thr['contextforge']['50']['errors']}")
    table.add("  CPU ms per call at 50 sessions vs mcp-proxy", ours50["cpu_ms_per_call"], proxy50["cpu_ms_per_call"],
              unit=" ms", target="info", ok=None, note="each side's processes, its downstream and (ours) Postgres "
              "backends; not the client")
    table.add("  ours on the handshake era vs mcp-proxy (p50)", lat["airlock_handshake"]["p50_ms"], proxy["p50_ms"],
              unit=" ms", target="info", ok=None, note="the protocol era both peers speak")
    table.add("  vs a direct stdio call (p50)", ours["p50_ms"], lat["direct"]["p50_ms"], unit=" ms", target="info",
              ok=None, note="no HTTP hop, no proxy")
    table.add("  SDK-only proxy (one HTTP hop, no Airlock work)", lat["floor"]["p50_ms"], lat["direct"]["p50_ms"],
              unit=" ms", target="info", ok=None, note="theirs: the direct call; a floor for a gateway on the SDK")
    table.add("  bare proxy (one HTTP hop, no MCP server code)", lat["bare"]["p50_ms"], lat["direct"]["p50_ms"],
              unit=" ms", target="info", ok=None, note="theirs: the direct call; a floor for any Python gateway")


def run_history(args, admin_url, report, table) -> None:
    if not (ROOT / "bench" / "history.py").exists():
        table.add("history queries at 100k runs / 1M events", "not built", target="p95 < 150 ms", ok=None,
                  note="slot for bench/history.py")
        return
    out = ROOT / "var" / "bench" / "history-run.json"
    size = ["--runs", "2000", "--events", "20000", "--calls", "20000", "--samples", "10"] if args.quick else []
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.history import main; "
            f"main({[*size, '--out', str(out), '--no-plans']!r})")
    env = {**os.environ, "DATABASE_URL": admin_url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench.history failed:\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    report["history"] = data
    scale = f"{data['loaded'].get('runs', '?'):,} runs" if isinstance(data.get("loaded"), dict) else ""
    for row in data["results"]:
        table.add(f"history: {row['query']} (p95)"[:46], row["p95_ms"], unit=" ms", target="< 150 ms",
                  ok=row["p95_ms"] < 150, note=scale)


def run_pages(args, admin_url, report, table) -> None:
    """Server time of whole page loads (bench/pages.py) at 10,000 runs: the run page, inbox and costs page."""
    out = ROOT / "var" / "bench" / "pages-run.json"
    size = ["--runs", "2000", "--pending", "50", "--samples", "10"] if args.quick else []
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.pages import main; "
            f"main({[*size, '--out', str(out)]!r})")
    env = {**os.environ, "DATABASE_URL": admin_url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench.pages failed:\n{done.stderr[-3000:]}")
    data = json.loads(out.read_text())
    report["pages"] = data
    scale = f"{data['loaded'].get('runs', '?'):,} runs" if isinstance(data.get("loaded"), dict) else ""
    for row in data["results"]:
        table.add(f"page: {row['page']} (p95)"[:46], row["p95_ms"], unit=" ms", target="< 300 ms",
                  ok=row["p95_ms"] < 300, note=f"{scale}, {row['queries']} queries")


def run_memory(args, setup, report, table, worker) -> None:
    from bench import live

    checkpoints = [20, 60] if args.quick else [100, 500, 1000]
    data = live.memory(setup, worker, checkpoints=checkpoints)
    report["memory"] = data
    first, last = data["samples"][0], data["samples"][-1]
    table.add(f"worker RSS after {first['runs']} runs", first["child_mb"], unit=" MB", target="<= 150 MB",
              ok=first["child_mb"] <= 150, note="the prefork child that runs the engine")
    growth = last["child_mb"] - first["child_mb"]
    table.add(f"worker RSS growth {first['runs']} -> {last['runs']} runs", growth, unit=" MB",
              target="<= 5 MB (none)", ok=growth <= 5)


def run_tokens(args, report, table) -> None:
    """Input tokens per crew run against CrewAI (bench/tokens.py: its own processes, venv and fake model)."""
    from bench import tokens

    data = tokens.measure([2, 4, 8] if args.quick else tokens.SIZES)
    report["tokens"] = data
    tokens.add_rows(table, data)


def _script(name: str, argv: list[str], admin_url: str) -> dict:
    """Runs bench/<name>.py (its own stack, database and Redis database) and returns the JSON it wrote."""
    out = ROOT / "var" / "bench" / f"{name}-run.json"
    out.unlink(missing_ok=True)
    env = {**os.environ, "DATABASE_URL": admin_url}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *argv, "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    if not out.exists():
        raise RuntimeError(f"bench/{name}.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def run_load(args, admin_url, report, table) -> None:
    """bench/load.py: the compose-like stack under a burst of runs and a storm of decisions (docs/benchmarks.md)."""
    from bench import load

    size = ["--runs", "40", "--storm", "60", "--clients", "20"] if args.quick else []
    data = _script("load", size, admin_url)
    report["load"] = {k: v for k, v in data.items() if k not in ("table", "stack")}
    for figure, measured, target, met in load.targets(data):
        table.add(f"under load: {figure}"[:46], measured, target=target, ok=met)


def run_scale(args, admin_url, report, table) -> None:
    """bench/scale.py: what a second worker or web process buys; what 10,000 waiting runs cost."""
    from bench import scale

    size = ["--runs", "40", "--parked", "300", "--sample", "20"] if args.quick else []
    data = _script("scale", size, admin_url)
    report["scale"] = data
    for figure, value, target, met in scale.rows(data):
        table.add(f"scale: {figure.strip()}"[:46], value, target=target, ok=met)


# --- main ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(METRICS)}")
    parser.add_argument("--passes", type=int, default=0, help="passes per figure (default 5, --quick 2)")
    args = parser.parse_args(argv)
    only = [m for m in args.only.split(",") if m] or list(METRICS)
    unknown = set(only) - set(METRICS)
    if unknown:
        parser.error(f"unknown metric(s): {', '.join(sorted(unknown))}")

    admin_url = admin_database_url()
    with contextlib.ExitStack() as room:  # our own databases and Redis database, dropped and flushed at the end
        ours_db = room.enter_context(scratch.database(admin_url, "airlock_bench_run"))
        theirs_db = room.enter_context(scratch.database(admin_url, "airlock_bench_langgraph"))
        redis_url = room.enter_context(scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"))
        return measure(args, only, admin_url, ours_db, theirs_db, redis_url)


def measure(args, only: list[str], admin_url: str, ours_db: str, theirs_db: str, redis_url: str) -> dict:
    started = time.monotonic()
    needs_theirs = bool({"steps", "bytes", "write", "fixed", "whole", "written", "approval"} & set(only))
    python = ensure_venv() if needs_theirs else None
    configure(ours_db, redis_url)
    from bench import engine

    setup = engine.setup([1, 5, 20, 100])
    report: dict = {"started": datetime.now(UTC).isoformat(), "quick": args.quick, "metrics": only,
                    "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}}
    table = Table()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"

    def save() -> None:  # after every metric: a stopped run keeps what it measured
        report["table"] = table.rows
        out.write_text(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=2,
                                  default=str))
        (RESULTS / "latest.txt").write_text(table.render() + "\n")

    if "steps" in only:
        run_steps(args, python, theirs_db, setup, report, table)
        save()
    if "bytes" in only:
        run_bytes(args, python, theirs_db, setup, report, table)
        save()
    report.pop("_bytes", None)
    for name, section in (("whole", run_whole), ("written", run_written), ("fixed", run_fixed),
                          ("write", run_write)):
        if name in only:
            section(args, python, theirs_db, setup, report, table)
            save()
    report.pop("_runs", None)
    if "floor" in only:
        run_floor(args, setup, ours_db, report, table)
        save()
    if "approval" in only:
        run_approval(args, python, theirs_db, admin_url, report, table)
        save()
    if "embedded" in only:
        run_embedded(args, setup, report, table)
        save()
    if "memory" in only:
        from bench import live

        with live.celery_worker() as worker:
            run_memory(args, setup, report, table, worker)
            save()
    if "events" in only:
        run_events(args, setup, report, table)
        save()
    if "gateway" in only:
        run_gateway(args, admin_url, report, table)
        save()
    if "history" in only:
        run_history(args, admin_url, report, table)
        save()
    if "pages" in only:
        run_pages(args, admin_url, report, table)
        save()
    if "tokens" in only:
        run_tokens(args, report, table)
        save()
    if "load" in only:
        run_load(args, admin_url, report, table)
        save()
    if "scale" in only:
        run_scale(args, admin_url, report, table)
        save()
    report["seconds"] = round(time.monotonic() - started, 1)
    save()
    print()
    print(table.render())
    print(f"\n{'quick ' if args.quick else ''}run in {report['seconds']} s; load average "
          f"{report['machine']['load'][0]:.1f} on {report['machine']['cpus']} CPUs; results: "
          f"{out.relative_to(ROOT)}")
    from django.db import connections

    from apps.registry.pool import pool

    pool.close_all()
    connections.close_all()
    return report


if __name__ == "__main__":
    report = main()
    sys.exit(0 if all(r["pass"] is not False for r in report["table"]) else 1)
