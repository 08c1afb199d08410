"""Benchmark: `tools/call` through Airlock's MCP gateway against the real gateways, on the same stdio server.

    .venv/bin/python -m bench.gateway [--calls 1000] [--seconds 5] [--rounds 3] [--no-contextforge]
        [--out var/bench/gateway.json]

Every side calls the same downstream, the bench's own stdio server (bench/lookup_server.py: `lookup(n)`,
2 KB of text), with the same client (the official MCP SDK's `Client` over Streamable HTTP, each session
with an HTTP client of its own):

- `airlock`: `uvicorn config.gateway:app` (the key checked against the database on every request, policy,
  argument schema, egress rules, the result scanned, ledger and audit rows committed by its writer
  process, the downstream session from its pool). The client negotiates the 2026-07-28 era (stateless).
- `airlock_handshake`: the same gateway with the client held to the handshake era (`initialize`, a
  session), the era both peers speak (info).
- `mcp_proxy`, `contextforge`: the peers (bench/gateway_peers.py), installed in venvs of their own.
- info: `direct` (the SDK client on the stdio server itself), `floor` (bench/gateway_floor.py: the same SDK
  server parts and pool as Airlock's gateway and nothing else) and `bare` (bench/gateway_bare.py: one HTTP
  hop and the pooled call, no MCP server code): what any Python gateway here costs at least.

Latency: `--calls` sequential calls on one session per side, in blocks of 100 taken in turn so every side
sees the same minutes of this shared machine. Throughput: calls per second with 1, 10 and 50 concurrent
sessions, each session calling in a loop for `--seconds`; every side at one level, then the next level,
`--rounds` times over, the median kept. Targets (issue 33): p50 <= 1.0x mcp-proxy's and <= 0.1x
ContextForge's; calls/s at 50 sessions >= 1.5x mcp-proxy's. Prints a table and writes JSON.

Airlock works on a database of its own (a fresh Postgres database next to DATABASE_URL's, dropped
afterwards, or a SQLite file under var/bench/); every process started here is stopped at the end, also on
a failure or Ctrl-C (bench/gateway_peers.py `Processes`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse, urlunparse

from bench.stats import quantile

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 100
WARMUP = 30
LEVELS = (1, 10, 50)
LATENCY_SIDES = ("direct", "airlock", "airlock_handshake", "floor", "bare", "mcp_proxy", "contextforge")
THROUGHPUT_SIDES = ("airlock", "mcp_proxy", "contextforge", "bare")
TARGETS = {"p50_vs_mcp_proxy": 1.0, "p50_vs_contextforge": 0.1, "calls_per_s_50_vs_mcp_proxy": 1.5}


def _bench_database() -> tuple[str, Callable[[], None]]:
    """A DATABASE_URL for a fresh database, and a function that drops it."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        import psycopg

        name = f"airlock_bench_gateway_{os.getpid()}"
        admin = urlunparse(urlparse(url)._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

        def drop() -> None:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        return urlunparse(urlparse(url)._replace(path=f"/{name}")), drop
    path = ROOT / "var" / "bench" / f"gateway-{os.getpid()}.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}", lambda: [p.unlink(missing_ok=True) for p in path.parent.glob(path.name + "*")]


def _prepare() -> str:
    """Migrates, and creates an org, the bench's stdio server, an agent granted its tool and a gateway key.
    Returns the key."""
    import django
    from django.core.management import call_command

    django.setup()
    import logging

    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.WARNING)  # handshake-era GET stream retries
    call_command("migrate", verbosity=0)
    from apps.accounts import services as accounts
    from apps.accounts.actors import system_actor
    from apps.agents import services as agents
    from apps.approvals.definition_changes import inbox
    from apps.gateway import services as gateway
    from apps.registry import services as registry
    from bench.gateway_peers import DOWNSTREAM

    org, _, _ = accounts.create_organization(name="Bench", owner_email="bench@example.com")
    actor = system_actor(org.id, "bench")
    server = registry.create_server(actor=actor, name="bench", transport="stdio", trust_tier="internal",
                                    command=DOWNSTREAM[0], args=list(DOWNSTREAM[1:]), cwd=str(ROOT), env={},
                                    sync=False)
    report = registry.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agents.create_agent(actor=actor, name="Bench", connection_id=connection.id, script=[],
                                grants=[{"tool": "bench.lookup", "policy": "auto"}])
    _, raw = gateway.create_key(actor=actor, name="bench", agent_id=agent.id, rate_limit_per_minute=100_000)
    from django.db import connections

    connections.close_all()
    return raw


# --- the client ------------------------------------------------------------------------------------------

def _connector(endpoint, mode: str = "auto") -> Callable[[], contextlib.AbstractAsyncContextManager]:
    """A function opening one client session to `endpoint` (an HTTP client of its own, as a separate host)."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    if endpoint.url == "stdio":
        params = StdioServerParameters(command=sys.executable, args=["-m", "bench.lookup_server"], cwd=str(ROOT))
        return lambda: Client(params, read_timeout_seconds=60)

    def connect():
        http = httpx2.AsyncClient(headers=endpoint.headers, timeout=httpx2.Timeout(60))
        return Client(streamable_http_client(endpoint.url, http_client=http), mode=mode, read_timeout_seconds=60)

    return connect


async def _latency(sides: dict, calls: int) -> dict[str, dict]:
    """`calls` sequential calls per side on one session each, in blocks taken in turn."""
    from bench.gateway_peers import TOOL_ARGUMENTS

    timings: dict[str, list[float]] = {side: [] for side in sides}
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for side, (connect, tool, _) in sides.items():
            clients[side] = await stack.enter_async_context(connect())
            for _ in range(WARMUP):
                result = await clients[side].call_tool(tool, TOOL_ARGUMENTS)
                assert not result.is_error, (side, result)
        done = 0
        while done < calls:
            n = min(BLOCK, calls - done)
            for side, (_, tool, _) in sides.items():
                client = clients[side]
                for _ in range(n):
                    start = time.perf_counter()
                    result = await client.call_tool(tool, TOOL_ARGUMENTS)
                    timings[side].append((time.perf_counter() - start) * 1000)
                    assert not result.is_error, (side, result)
            done += n
        protocols = {side: client.protocol_version for side, client in clients.items()}
    return {side: {"p50_ms": round(statistics.median(v), 3), "p95_ms": round(quantile(v, 0.95), 3),
                   "mean_ms": round(statistics.fmean(v), 3), "protocol": protocols[side]}
            for side, v in timings.items()}


async def _throughput(connect, tool: str, sessions: int, seconds: float, cpu: Callable[[], dict[int, float]]
                      ) -> dict:
    """Calls per second of `sessions` concurrent sessions, each calling in a loop for `seconds` once all
    are open: completed calls over the time from the start to the last answer, and the CPU time the side's
    processes spent per call meanwhile. A failed call counts as an error (a session stops after 20)."""
    from bench.gateway_peers import TOOL_ARGUMENTS, process_name

    ready, go = 0, asyncio.Event()
    all_ready = asyncio.Event()
    started: list[float] = []
    counts = {"ok": 0, "errors": 0, "last": 0.0}
    errors: list[str] = []

    async def session() -> None:
        nonlocal ready
        async with connect() as client:
            for _ in range(3):
                await client.call_tool(tool, TOOL_ARGUMENTS)
            ready += 1
            if ready == sessions:
                all_ready.set()
            await go.wait()
            stop_at, failed = started[0] + seconds, 0
            while time.perf_counter() < stop_at and failed < 20:
                try:
                    result = await client.call_tool(tool, TOOL_ARGUMENTS)
                    ok = not result.is_error
                    if not ok:
                        errors.append(str(result.content)[:200])
                except Exception as exc:  # a peer that fails under load: counted, not fatal
                    ok = False
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                counts["ok" if ok else "errors"] += 1
                failed += not ok
                counts["last"] = time.perf_counter()

    async def starter() -> None:
        await all_ready.wait()
        before.update(await asyncio.to_thread(cpu))
        client_cpu.append(time.process_time())
        started.append(time.perf_counter())
        go.set()

    before: dict[int, float] = {}
    client_cpu: list[float] = []
    await asyncio.gather(starter(), *(session() for _ in range(sessions)))
    client_cpu.append(time.process_time())
    after = await asyncio.to_thread(cpu)
    spent = sum(used - before.get(pid, 0.0) for pid, used in after.items())
    by_process: dict[str, float] = {}
    for pid, used in after.items():
        name = process_name(pid)
        by_process[name] = by_process.get(name, 0.0) + used - before.get(pid, 0.0)
    elapsed = counts["last"] - started[0]
    return {"calls_per_s": round(counts["ok"] / elapsed, 1) if elapsed > 0 else 0.0, "calls": counts["ok"],
            "errors": counts["errors"], "seconds": round(elapsed, 2), "first_errors": errors[:3],
            "cpu_ms_per_call": round(spent * 1000 / counts["ok"], 3) if counts["ok"] and after else None,
            "client_cpu_ms_per_call": round((client_cpu[1] - client_cpu[0]) * 1000 / counts["ok"], 3)
            if counts["ok"] else None,
            "cpu_ms_per_call_by_process": {name: round(used * 1000 / counts["ok"], 3)
                                           for name, used in by_process.items()} if counts["ok"] else {}}


async def _throughputs(sides: dict, seconds: float, rounds: int) -> dict[str, dict]:
    samples: dict[str, dict[str, list[dict]]] = {side: {str(n): [] for n in LEVELS} for side in sides}
    for _ in range(rounds):
        for sessions in LEVELS:
            for side, (connect, tool, endpoint) in sides.items():
                samples[side][str(sessions)].append(await _throughput(connect, tool, sessions, seconds, endpoint.cpu))
    return {side: {level: {"calls_per_s": statistics.median(s["calls_per_s"] for s in runs),
                           "cpu_ms_per_call": _median_or_none([s["cpu_ms_per_call"] for s in runs]),
                           "errors": sum(s["errors"] for s in runs), "samples": runs}
                   for level, runs in levels.items()} for side, levels in samples.items()}


def _median_or_none(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


# --- the run ---------------------------------------------------------------------------------------------

def _production_settings() -> None:
    # Production settings, as bench/run.py runs it: with DEBUG on, every query of the gateway went through
    # Django's debug cursor (timed and kept), which no deployment pays.
    from cryptography.fernet import Fernet

    for key, value in {"DEBUG": "0", "SECRET_KEY": "bench-only-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1,localhost",
                       "SECURE_SSL_REDIRECT": "0", "AIRLOCK_ENCRYPTION_KEY": Fernet.generate_key().decode()}.items():
        os.environ.setdefault(key, value)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"


def _start_ours(processes, logs: Path, key: str) -> dict:
    from bench.gateway_peers import Endpoint, free_port, wait_for_port

    endpoints = {}
    for side, app in (("airlock", "config.gateway:app"), ("floor", "bench.gateway_floor:app"),
                      ("bare", "bench.gateway_bare:app")):
        port, log = free_port(), logs / f"{side}.log"
        proc = processes.start([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                                "--no-access-log", "--log-level", "warning"], log=log)
        wait_for_port(port, proc, log)
        endpoints[side] = Endpoint(side, f"http://127.0.0.1:{port}/mcp", tool="bench.lookup", roots=[proc.pid],
                                   headers={"Authorization": f"Bearer {key}"} if side == "airlock" else {},
                                   database=os.environ["DATABASE_URL"] if side == "airlock" and
                                   os.environ["DATABASE_URL"].startswith("postgres") else "")
    return endpoints


def _terminate(signum, frame):  # SIGTERM (a parent stopping us) unwinds like Ctrl-C: the finally stops all
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="sequential calls per side (latency)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one throughput sample")
    parser.add_argument("--rounds", type=int, default=3, help="throughput samples per side and level")
    parser.add_argument("--no-peers", action="store_true", help="Airlock, the direct call and the floors only")
    parser.add_argument("--no-contextforge", action="store_true",
                        help="mcp-proxy as the only peer (ContextForge's venv takes minutes to install)")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "gateway.json"))
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    _production_settings()
    from bench.gateway_peers import Endpoint, Processes, start_contextforge, start_mcp_proxy

    previous = signal.signal(signal.SIGTERM, _terminate)
    database_url, drop = _bench_database()
    os.environ["DATABASE_URL"] = database_url
    print("bench.gateway: Airlock on " + ("Postgres" if database_url.startswith("postgres") else
          "SQLite, the embedded mode (set DATABASE_URL=postgres://... and REDIS_URL for the deployed stack)"),
          file=sys.stderr)
    logs = ROOT / "var" / "bench" / f"gateway-{os.getpid()}"
    processes = Processes()
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        key = _prepare()
        endpoints = {"direct": Endpoint("direct", "stdio", tool="lookup"), **_start_ours(processes, logs, key)}
        if not args.no_peers:
            endpoints["mcp_proxy"] = start_mcp_proxy(processes, logs)
            if not args.no_contextforge:
                endpoints["contextforge"] = start_contextforge(processes, logs)
        sides = {}
        for side in LATENCY_SIDES:
            endpoint = endpoints.get(side.removesuffix("_handshake"))
            if endpoint is not None:
                sides[side] = (_connector(endpoint, "legacy" if side.endswith("_handshake") else "auto"),
                               endpoint.tool, endpoint)
        latency = asyncio.run(_latency(sides, args.calls))
        throughput = asyncio.run(_throughputs({s: sides[s] for s in THROUGHPUT_SIDES if s in sides},
                                              args.seconds, args.rounds))
    except BaseException:
        print(f"bench.gateway: the processes' logs are in {logs}", file=sys.stderr)
        raise
    else:
        processes.stop_all()
        shutil.rmtree(logs, ignore_errors=True)  # the logs and ContextForge's SQLite file, kept after a failure
    finally:
        processes.stop_all()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        drop()
        signal.signal(signal.SIGTERM, previous)
    report = {"calls": args.calls, "seconds": args.seconds, "rounds": args.rounds,
              "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
              "downstream": "bench/lookup_server.py over stdio (lookup(n), 2 KB of text)",
              "airlock_database": "postgres" if database_url.startswith("postgres") else "sqlite",
              "airlock_redis": bool(os.environ.get("REDIS_URL")),
              "versions": {e.name: e.version for e in endpoints.values() if e.version},
              "latency": latency, "throughput": throughput}
    report["targets"] = _targets(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report))
    return report


def _targets(report: dict) -> dict:
    """Each target's ratio (ours over theirs) and whether it is met; absent peers give None."""
    lat, thr = report["latency"], report["throughput"]
    out = {}
    for peer, target in (("mcp_proxy", TARGETS["p50_vs_mcp_proxy"]), ("contextforge", TARGETS["p50_vs_contextforge"])):
        if peer in lat:
            ratio = lat["airlock"]["p50_ms"] / lat[peer]["p50_ms"]
            out[f"p50_vs_{peer}"] = {"ratio": round(ratio, 3), "target": f"<= {target}", "ok": ratio <= target}
    if "mcp_proxy" in thr:
        ours, theirs = thr["airlock"]["50"], thr["mcp_proxy"]["50"]
        ratio = ours["calls_per_s"] / theirs["calls_per_s"] if theirs["calls_per_s"] else float("inf")
        target = TARGETS["calls_per_s_50_vs_mcp_proxy"]
        out["calls_per_s_50_vs_mcp_proxy"] = {"ratio": round(ratio, 3), "target": f">= {target}",
                                              "ok": ratio >= target and ours["errors"] == 0}
    return out


def render(report: dict) -> str:
    lines = [f"{'tools/call, one session':<24} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}  protocol   "
             f"({report['calls']} calls each)"]
    for side, r in report["latency"].items():
        lines.append(f"{side:<24} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['mean_ms']:>8.2f}  {r['protocol']}")
    lines.append(f"\n{'calls/s (median)':<24} " + " ".join(f"{f'{n} sess.':>10}" for n in LEVELS)
                 + f"  {'CPU ms/call at 50':>17}  errors")
    for side, levels in report["throughput"].items():
        cpu = levels[str(LEVELS[-1])]["cpu_ms_per_call"]
        lines.append(f"{side:<24} " + " ".join(f"{levels[str(n)]['calls_per_s']:>10.1f}" for n in LEVELS)
                     + f"  {'-' if cpu is None else f'{cpu:.2f}':>17}  {sum(levels[str(n)]['errors'] for n in LEVELS)}")
    lines.append("")
    for name, t in report["targets"].items():
        lines.append(f"{name:<30} {t['ratio']:>7.3f}  target {t['target']:<7} {'ok' if t['ok'] else 'MISSED'}")
    lines.append(f"load average {report['load_before']} -> {report['load_after']} on {report['cpus']} CPUs; "
                 f"peers: {report['versions']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
