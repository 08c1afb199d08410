"""Benchmark: what a gateway process costs while it holds host sessions that make no calls.

A gateway keeps every host session it has served for `SESSION_IDLE` (30 minutes) after its last call, and its
maintenance (every `AIRLOCK_GATEWAY_POLL_S`) must find those a person cancelled, or that ended elsewhere. This
opens N handshake-era sessions (each its own MCP session id, one call each), then measures, for `--seconds`
with no calls at all, the CPU of the gateway (with its ledger writer and the downstream server) and of its
Postgres backends, per second, for each N. Same database and key set-up as bench/gateway.py.

    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python -m bench.gateway_held --held 0,200,1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def _open_sessions(connect, tool: str, count: int, health: str) -> None:
    """Opens handshake-era sessions, ten at a time, until the gateway holds `count`."""
    import httpx2

    from bench.gateway_peers import TOOL_ARGUMENTS

    async def one() -> None:
        async with connect() as client:
            result = await client.call_tool(tool, TOOL_ARGUMENTS)
            assert not result.is_error, result

    async with httpx2.AsyncClient() as http:
        while (held := (await http.get(health)).json()["open_sessions"]) < count:
            await asyncio.gather(*(one() for _ in range(min(10, count - held))))


def _idle_cpu(endpoint, seconds: float) -> dict[str, float]:
    """CPU milliseconds per second of the gateway's processes and its Postgres backends over `seconds`."""
    from bench.gateway_peers import process_name

    before, start = endpoint.cpu(), time.monotonic()
    time.sleep(seconds)
    after, elapsed = endpoint.cpu(), time.monotonic() - start
    by_name: dict[str, float] = {}
    for pid, spent in after.items():
        name = "postgres" if process_name(pid) == "postgres" else "gateway"
        by_name[name] = by_name.get(name, 0.0) + (spent - before.get(pid, 0.0)) * 1000 / elapsed
    return {name: round(ms, 2) for name, ms in sorted(by_name.items())}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", default="0,200,1000", help="numbers of held sessions to measure at, in order")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each idle measurement")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "gateway-held.json"))
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from bench.gateway import _bench_database, _connector, _prepare, _production_settings, _start_ours
    from bench.gateway_peers import Processes

    _production_settings()
    database_url, drop = _bench_database()
    os.environ["DATABASE_URL"] = database_url
    print("bench.gateway_held: Airlock on " + ("Postgres" if database_url.startswith("postgres") else "SQLite"),
          file=sys.stderr)
    processes, logs = Processes(), ROOT / "var" / "bench" / f"gateway-held-{os.getpid()}"
    rows = []
    try:
        endpoint = _start_ours(processes, logs, _prepare())["airlock"]
        connect, health = _connector(endpoint, "legacy"), endpoint.url.removesuffix("/mcp") + "/healthz"
        for count in (int(n) for n in args.held.split(",")):
            asyncio.run(_open_sessions(connect, endpoint.tool, count, health))
            time.sleep(2)  # the last sessions' ledger batches
            rows.append({"held": count, "cpu_ms_per_s": _idle_cpu(endpoint, args.seconds)})
            print(f"held {count:6d}  CPU ms per second: {rows[-1]['cpu_ms_per_s']}", flush=True)
    finally:
        processes.stop_all()
        from django.db import connections

        connections.close_all()
        drop()
    report = {"seconds": args.seconds, "poll_s": float(os.environ.get("AIRLOCK_GATEWAY_POLL_S", "1.0")),
              "airlock_database": "postgres" if database_url.startswith("postgres") else "sqlite", "rows": rows,
              "load_after": [round(x, 2) for x in os.getloadavg()]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
