"""A web process's CPU per API request: Airlock's ASGI app beside another, on the same database, at the same time.

    .venv/bin/python -m bench.web_cpu [--path /api/v1/me] [--blocks 30] [--against bench.web_twin:application]

Two web processes run side by side (A: `config.asgi:application`; B: `--against`, by default the same app on
Django's own ASGI handler, bench/web_twin.py). One client sends GETs with an API token to each in turn, in blocks
of 200, alternating which goes first, and reads each process's CPU time (/proc) around its block. A drifting
machine then slows both alike: the ratio per block is the figure (`--against config.asgi:application` reads
~1.0). Production settings, a scratch database and Redis database (bench/scratch.py). Prints both sides' CPU per
request and B/A, the median over the blocks, and writes them to `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import approval, scratch  # noqa: E402
from bench.live import uvicorn_app  # noqa: E402

BLOCK = 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_token() -> str:
    from apps.accounts import services as accounts

    user = accounts.ensure_user(email="web-cpu@example.com", password="web-cpu-password-123")
    org, _, _ = accounts.create_organization(name="Web CPU", owner_email=user.email)
    return accounts.create_api_token(actor=None, org_id=org.id, name="bench", role="viewer")[1]


def measure(args) -> dict:
    with scratch.database(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/airlock",
                          "airlock_bench_web_cpu") as db_url, \
            scratch.redis_db(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0") as redis_url, \
            contextlib.ExitStack() as processes:
        approval.start_production_django(db_url, redis_url, f"airlock-web-cpu-{os.getpid()}")
        token = api_token()
        sides = {}
        for name, app in (("A", "config.asgi:application"), ("B", args.against)):
            port, web = uvicorn_app(app, f"web-cpu-{name}")
            sides[name] = (processes.enter_context(web).pid, http.client.HTTPConnection("127.0.0.1", port, timeout=30))

        def get(connection: http.client.HTTPConnection) -> None:
            connection.request("GET", args.path, headers={"Authorization": f"Bearer {token}"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"GET {args.path}: {answer.status}")

        for _pid, connection in sides.values():  # warm: imports, the pool, prepared statements
            for _ in range(300):
                get(connection)
        per_request: dict[str, list[float]] = {"A": [], "B": []}
        for block in range(args.blocks):
            for name in ("A", "B") if block % 2 == 0 else ("B", "A"):
                pid, connection = sides[name]
                before = cpu_seconds(pid)
                for _ in range(BLOCK):
                    get(connection)
                per_request[name].append((cpu_seconds(pid) - before) / BLOCK * 1000)
    ratios = [b / a for a, b in zip(per_request["A"], per_request["B"], strict=True)]
    return {"started": args.started, "path": args.path, "A": "config.asgi:application", "B": args.against,
            "blocks": args.blocks, "requests_per_block": BLOCK, "load": [round(x, 2) for x in os.getloadavg()],
            "cpu_ms_per_request": {name: {"median": round(statistics.median(v), 3), "blocks": [round(x, 3) for x in v]}
                                   for name, v in per_request.items()},
            "b_over_a_median": round(statistics.median(ratios), 3)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default="/api/v1/me")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--against", default="bench.web_twin:application")
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "web-cpu.json"))
    args = parser.parse_args(argv)
    args.started = datetime.now(UTC).isoformat()
    report = measure(args)
    cpu = report["cpu_ms_per_request"]
    print(f"GET {args.path}, web process CPU per request (median of {args.blocks} blocks of {BLOCK}): "
          f"A (config.asgi) {cpu['A']['median']:.2f} ms, B ({args.against}) {cpu['B']['median']:.2f} ms, "
          f"B/A {report['b_over_a_median']:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
