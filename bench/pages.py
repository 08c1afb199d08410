"""Benchmark: server time of the run page, the inbox and the costs page at 10,000 runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/airlock .venv/bin/python -m bench.pages \
        [--runs 10000] [--pending 200] [--samples 30] [--out var/bench/pages.json] [--reuse]

Loads a database of its own (dropped at the end; with --reuse the kept `airlock_bench_pages`, made and marked by
these benchmarks) with bench/history.py's loader (10 model calls and 10 events per
run, two ledger rows per run, 5 % held), leaves the `--pending` newest held calls waiting in the inbox, then
times whole page loads in process with Django's test client signed in as the owner: URL routing,
middleware, views, selectors, templates, everything but the socket. Prints p50/p95 and the number of
SQL queries per page against the target (p95 < 300 ms) and writes JSON. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench import history
from bench.stats import quantile

ROOT = history.ROOT
KEPT_NAME = "airlock_bench_pages"  # --reuse: kept between runs, marked as the benchmarks' own
TARGET_MS = 300.0


def leave_pending(pending: int) -> int:
    """The newest `pending` held calls wait for a person again (the loader decides them all)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            UPDATE approvals_approvalrequest SET status = 'approved', decided_at = created_at + interval '20 minutes',
                   expires_at = NULL WHERE status = 'pending'""")
        cursor.execute("""
            UPDATE approvals_approvalrequest SET status = 'pending', decided_at = NULL,
                   expires_at = now() + interval '20 hours'
            WHERE id IN (SELECT id FROM approvals_approvalrequest ORDER BY created_at DESC LIMIT %s)""", [pending])
        cursor.execute("ANALYZE approvals_approvalrequest")
        cursor.execute("SELECT count(*) FROM approvals_approvalrequest WHERE status = 'pending'")
        return cursor.fetchone()[0]


def pages(org_id) -> dict[str, str]:
    from apps.runs.models import Run

    held = Run.objects.filter(org_id=org_id, ledger__state="held").order_by("-created_at").values_list(
        "id", flat=True).first()
    plain = Run.objects.filter(org_id=org_id, status="succeeded").order_by("-created_at").values_list(
        "id", flat=True).first()
    return {"run page (with a held call)": f"/runs/{held}/", "run page": f"/runs/{plain}/", "inbox": "/inbox/",
            "costs page": "/costs/", "runs list": "/runs/"}


def measure(client, url: str, samples: int) -> tuple[list[float], int]:
    from django.db import connection

    count = []

    def counted(execute, sql, params, many, context):
        count.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counted):
        answer = client.get(url, secure=True)
    if answer.status_code != 200:
        raise RuntimeError(f"{url} answered {answer.status_code}")
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        client.get(url, secure=True)
        times.append((time.perf_counter() - started) * 1000)
    return times, len(count)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "pages.json"))
    parser.add_argument("--reuse", action="store_true",
                        help=f"load into (or reuse the load of) the kept database {KEPT_NAME}, and keep it")
    args = parser.parse_args(argv)

    with history._database(args.reuse, KEPT_NAME) as url:
        history._setup_django(url)
        return _measure(args)


def _measure(args) -> dict:
    started = time.perf_counter()
    loaded = history.load(runs=args.runs, events=args.runs * 10, calls=args.runs * 10)
    print(f"loaded {loaded} in {time.perf_counter() - started:.0f} s")
    pending = leave_pending(args.pending)

    from django.test import Client
    from django.test.utils import override_settings

    from apps.accounts.models import Membership

    owner = Membership.objects.select_related("user").get(org__name="Bench", role="owner")
    results = []
    storage = {"default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
               "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    with override_settings(ALLOWED_HOSTS=["testserver"], STORAGES=storage):
        client = Client()
        client.force_login(owner.user)
        print(f"\n{'page':<30} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  target p95 < {TARGET_MS:.0f} ms")
        for name, url in pages(owner.org_id).items():
            times, count = measure(client, url, args.samples)
            p50, p95 = statistics.median(times), quantile(times, 0.95)
            print(f"{name:<30} {p50:>8.1f} {p95:>8.1f} {count:>8}  {'ok' if p95 < TARGET_MS else 'OVER'}")
            results.append({"page": name, "url": url, "p50_ms": round(p50, 2), "p95_ms": round(p95, 2),
                            "queries": count, "within_target": p95 < TARGET_MS})
    report = {"benchmark": "pages", "loaded": loaded, "pending_approvals": pending, "target_p95_ms": TARGET_MS,
              "samples": args.samples, "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
