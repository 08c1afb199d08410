"""Benchmark: `tools/call` latency through the MCP gateway versus directly to the same stdio server.

    .venv/bin/python -m bench.gateway [--calls 1000] [--out var/bench/gateway.json]

All sides use the official MCP SDK `Client` and the bundled order desk (`get_order_status`, a
read the agent's grant allows): directly over stdio, and through `uvicorn config.gateway:app`
(Streamable HTTP in, the gateway's pooled stdio session out, policy, ledger and audit included).
A third side is the floor: `uvicorn bench.gateway_floor:app`, a proxy of the same SDK parts with
nothing of Airlock's (no key, policy, ledger or scan), what one SDK HTTP hop over the same pooled
stdio session costs. A fourth, `bench/gateway_bare.py`, answers `tools/call` without the SDK's server
parts at all: what uvicorn, one HTTP request and the pooled call cost before any MCP server code runs,
the floor of any Python gateway here. Calls alternate in blocks so all sides see the same machine load. Prints
p50/p95 and the ratios and writes them as JSON. Target: p50 ratio <= 2.5 (the gateway adds about
one HTTP hop).

It works on a database of its own (a fresh Postgres database next to DATABASE_URL's, dropped
afterwards, or a SQLite file under var/bench/), so it never touches real data.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 100
WARMUP = 30
SIDES = ("direct", "gateway", "floor", "bare")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _bench_database() -> tuple[str, callable]:
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


def _prepare(data_file: Path) -> str:
    """Migrates, and creates an org, the order desk server, an agent and a gateway key. Returns the key."""
    import django
    from django.core.management import call_command

    django.setup()
    import logging

    logging.getLogger("httpx2").setLevel(logging.WARNING)
    call_command("migrate", verbosity=0)
    from apps.accounts import services as accounts
    from apps.accounts.actors import system_actor
    from apps.agents import services as agents
    from apps.gateway import services as gateway
    from apps.registry import services as registry

    org, _, _ = accounts.create_organization(name="Bench", owner_email="bench@example.com")
    actor = system_actor(org.id, "bench")
    server = registry.create_server(actor=actor, name="orders", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "apps.demo.order_desk", "stdio"],
                                    cwd=str(ROOT), env={"ORDER_DESK_DATA": str(data_file)}, sync=False)
    report = registry.sync_server(actor=actor, server_id=server.id)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agents.create_agent(actor=actor, name="Bench", connection_id=connection.id, script=[],
                                grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    _, raw = gateway.create_key(actor=actor, name="bench", agent_id=agent.id, rate_limit_per_minute=100_000)
    from django.db import connections

    connections.close_all()
    return raw


async def _measure(url: str, key: str, data_file: Path, calls: int,
                   floor_urls: dict[str, str]) -> dict[str, list[float]]:
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "apps.demo.order_desk", "stdio"],
                                   env={"ORDER_DESK_DATA": str(data_file)}, cwd=str(ROOT))
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(60))
    timings: dict[str, list[float]] = {side: [] for side in SIDES}
    async with contextlib.AsyncExitStack() as stack:
        direct = await stack.enter_async_context(Client(params))
        via = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
        sides = {"direct": (direct, "get_order_status"), "gateway": (via, "orders.get_order_status")}
        for side, floor_url in floor_urls.items():
            floor_http = httpx2.AsyncClient(timeout=httpx2.Timeout(60))
            floor = await stack.enter_async_context(Client(streamable_http_client(floor_url, http_client=floor_http)))
            sides[side] = (floor, "orders.get_order_status")
        for client, name in sides.values():
            for _ in range(WARMUP):
                assert not (await client.call_tool(name, {"order_id": "A-1001"})).is_error
        done = 0
        while done < calls:
            n = min(BLOCK, calls - done)
            for side, (client, name) in sides.items():
                for _ in range(n):
                    start = time.perf_counter()
                    result = await client.call_tool(name, {"order_id": "A-1001"})
                    timings[side].append((time.perf_counter() - start) * 1000)
                    assert not result.is_error, result
            done += n
        protocols = {side: client.protocol_version for side, (client, _) in sides.items()}
    return {**timings, "protocols": protocols}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "gateway.json"))
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    # Production settings, as bench/run.py runs it: with DEBUG on, every query of the gateway went through
    # Django's debug cursor (timed and kept), which no deployment pays.
    from cryptography.fernet import Fernet

    for key, value in {"DEBUG": "0", "SECRET_KEY": "bench-only-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1,localhost",
                       "SECURE_SSL_REDIRECT": "0", "AIRLOCK_ENCRYPTION_KEY": Fernet.generate_key().decode()}.items():
        os.environ.setdefault(key, value)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    database_url, drop = _bench_database()
    os.environ["DATABASE_URL"] = database_url
    data_file = ROOT / "var" / "bench" / f"orders-{os.getpid()}.json"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    servers = []
    try:
        key = _prepare(data_file)
        from tests.processes import free_port, stop, wait_for_port

        urls = []
        for app in ("config.gateway:app", "bench.gateway_floor:app", "bench.gateway_bare:app"):
            port = free_port()
            log = data_file.with_suffix(f".{app.split('.')[-1].split(':')[0]}.log")
            with log.open("w") as out:
                servers.append(subprocess.Popen(
                    [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                     "--no-access-log", "--log-level", "warning"],
                    cwd=ROOT, env={**os.environ, "ORDER_DESK_DATA": str(data_file)}, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True))
            wait_for_port(port, servers[-1], log)
            urls.append(f"http://127.0.0.1:{port}/mcp")
        timings = asyncio.run(_measure(urls[0], key, data_file, args.calls,
                                       floor_urls={"floor": urls[1], "bare": urls[2]}))
    finally:
        for server in servers:
            stop(server, timeout=15)
        from django.db import connections

        connections.close_all()
        drop()
        for leftover in data_file.parent.glob(data_file.stem + ".*"):
            leftover.unlink(missing_ok=True)
    report = {"calls": args.calls, "protocols": timings["protocols"]}
    for side in SIDES:
        values = timings[side]
        report[side] = {"p50_ms": round(statistics.median(values), 3), "p95_ms": round(_quantile(values, 0.95), 3),
                        "mean_ms": round(statistics.fmean(values), 3)}
    report["p50_ratio"] = round(report["gateway"]["p50_ms"] / report["direct"]["p50_ms"], 2)
    report["p95_ratio"] = round(report["gateway"]["p95_ms"] / report["direct"]["p95_ms"], 2)
    report["floor_p50_ratio"] = round(report["floor"]["p50_ms"] / report["direct"]["p50_ms"], 2)
    report["bare_p50_ratio"] = round(report["bare"]["p50_ms"] / report["direct"]["p50_ms"], 2)
    report["target_p50_ratio"] = 2.5
    report["ok"] = report["p50_ratio"] <= 2.5
    print(f"{'tools/call':<10} {'p50 ms':>9} {'p95 ms':>9} {'mean ms':>9}   ({args.calls} calls each)")
    for side in SIDES:
        r = report[side]
        print(f"{side:<10} {r['p50_ms']:>9.2f} {r['p95_ms']:>9.2f} {r['mean_ms']:>9.2f}   "
              f"protocol {timings['protocols'][side]}")
    print(f"{'ratio':<10} {report['p50_ratio']:>9.2f} {report['p95_ratio']:>9.2f}   "
          f"target p50 <= 2.5: {'ok' if report['ok'] else 'MISSED'}; the SDK-only floor's p50 ratio: "
          f"{report['floor_p50_ratio']:.2f}, the bare proxy's: {report['bare_p50_ratio']:.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
