"""Benchmark: the run history, run detail and costs page queries at 100k runs / 1M events / 1M model calls.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/airlock .venv/bin/python -m bench.history \
        [--runs 100000] [--events 1000000] [--calls 1000000] [--samples 40] [--out var/bench/history.json] [--reuse]

Creates a database of its own on DATABASE_URL's server and drops it at the end (with --reuse: the kept database
`airlock_bench_history`, made and marked by these benchmarks, reused with its load), migrates it,
loads one organisation's history with COPY (runs over the last 90 days, 10 model calls and 10
events per run, two ledger rows per run with 5 % held and 1 % with findings), fills the daily
spend rollup from the usage rows (`apps.costs.rollup.rebuild`, the migration's backfill),
ANALYZEs, then times the same selector calls the pages make (apps.runs.history,
apps.runs.selectors, apps.costs.selectors). Prints p50/p95 per query with the target (p95 < 150
ms), the EXPLAIN (ANALYZE, BUFFERS) plan of each, and writes everything as JSON. Not part of the
test suite.

`main(argv)` is the entry point (bench/run.py can call it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import namedtuple
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from bench.stats import quantile

ROOT = Path(__file__).resolve().parent.parent
KEPT_NAME = "airlock_bench_history"  # --reuse: kept between runs, marked as the benchmarks' own
TARGET_MS = 150.0
CREWS = 12
Planned = namedtuple("Planned", "id crew_id crew_name agent_id at status n")


@contextmanager
def _database(reuse: bool, name: str = KEPT_NAME) -> Iterator[str]:
    """A database of its own, dropped after (bench/scratch.py); with `reuse`, the kept database `name`, made and
    marked by these benchmarks (a load of a million runs takes a while), never one anyone else made."""
    from bench import scratch

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("bench.history needs DATABASE_URL pointing at Postgres (the queries it measures are Postgres's).")
    if reuse:
        yield scratch.kept_database(url, name)
    else:
        with scratch.database(url, "airlock_bench_history") as fresh:
            yield fresh


def _setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- loading -------------------------------------------------------------------------------------

def _org_and_crews():
    from apps.accounts import services as accounts
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership, Organization
    from apps.agents import services as agents
    from apps.crews import services as crews
    from apps.crews.models import Crew

    org = Organization.objects.filter(name="Bench").first()
    if org is None:
        user = accounts.ensure_user(email="bench@example.com", password="bench-password-123")
        org, _, _ = accounts.create_organization(name="Bench", owner_email=user.email)
    owner = Membership.objects.select_related("user", "org").get(org=org, role="owner")
    if not Crew.objects.filter(org=org).exists():
        actor = member_actor(owner)
        connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
        for n in range(CREWS):
            agent = agents.create_agent(actor=actor, name=f"Agent {n}", connection_id=connection.id, script=[],
                                        grants=[])
            crews.create_crew(actor=actor, name=f"Crew {n}", process="sequential",
                              tasks=[{"name": "work", "agent_id": agent.id, "description": "Do {order_id}."}],
                              inputs=[{"name": "order_id", "type": "string"}])
    crew_agents = [(c.id, c.name, c.tasks.first().agent_id) for c in Crew.objects.filter(org=org).order_by("name")]
    return org, owner, crew_agents


def _copy(cursor, table: str, columns: list[str], rows) -> int:
    count = 0
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


def load(*, runs: int, events: int, calls: int) -> dict[str, int]:
    from django.db import connection

    from apps.runs.models import Run

    org, owner, crew_agents = _org_and_crews()
    if Run.objects.filter(org=org).count() >= runs:
        return {"runs": Run.objects.filter(org=org).count(), "reused": 1}
    rng = random.Random(7)
    now = datetime.now(UTC)
    statuses = ["succeeded"] * 80 + ["failed"] * 8 + ["waiting"] * 5 + ["limit_exceeded"] * 4 + ["cancelled"] * 3
    per_run_calls, per_run_events = max(1, calls // runs), max(1, events // runs)
    plan = []
    for n in range(runs):
        crew_id, crew_name, agent_id = crew_agents[n % len(crew_agents)]
        created = now - timedelta(seconds=rng.randint(0, 90 * 86400))
        plan.append(Planned(uuid.uuid4(), crew_id, crew_name, agent_id, created, rng.choice(statuses), n))
    empty = json.dumps({})
    pg = connection.connection
    with pg.cursor() as cursor:
        run_cols = ["id", "org_id", "created_at", "updated_at", "crew_id", "crew_name", "status", "inputs", "output",
                    "error", "error_class", "snapshot", "started_by_id", "started_by_label", "idempotency_key",
                    "lease_owner", "deliveries", "state", "hops", "tool_calls", "tokens_in", "tokens_out",
                    "tokens_cached", "cost_usd", "cost_unknown_calls", "cancel_requested", "tainted", "last_seq",
                    "started_at", "finished_at", "attention", "origin", "trace_parent"]
        _copy(cursor, "runs_run", run_cols, (
            (rid, org.id, at, at, cid, cname, status, json.dumps({"order_id": f"A-{n:06d}"}),
             f"Order A-{n:06d} handled: {rng.choice(['refunded', 'shipped', 'escalated', 'closed'])}.",
             "", "", json.dumps({"crew": {"id": str(cid), "name": cname}, "agents": {}, "tools": {}}),
             owner.user_id, owner.user.email, "", "", 0, empty, 1, 2, 10_000, 500, 0,
             Decimal("0.0123") if n % 50 else None, 0 if n % 50 else 1, False, False, per_run_events,
             at, at + timedelta(seconds=30), "[]", "", "")
            for rid, cid, cname, _aid, at, status, n in plan))
        step_cols = ["id", "org_id", "created_at", "updated_at", "run_id", "parent_id", "position", "kind", "agent_id",
                     "agent_name", "task", "status", "status_reason", "output", "provider", "model", "input_tokens",
                     "cached_tokens", "output_tokens", "cost_usd", "price_source", "latency_ms", "started_at",
                     "finished_at"]
        turns = {rid: uuid.uuid4() for rid, *_ in plan}

        def steps():
            for r in plan:
                yield (turns[r.id], org.id, r.at, r.at, r.id, None, 1, "agent", r.agent_id, f"Agent {r.n % CREWS}",
                       "work", "done", "", "done", "", "", 0, 0, 0, None, "", 0, r.at, r.at + timedelta(seconds=30))
                for k in range(per_run_calls):
                    start = r.at + timedelta(seconds=k * 3)
                    yield (uuid.uuid4(), org.id, start, start, r.id, turns[r.id], k + 2, "llm", r.agent_id,
                           f"Agent {r.n % CREWS}", "work", "", "", "ok", "openai", "gpt-4o-mini", 1000, 0, 50,
                           Decimal("0.00123"), "genai-prices", 800, start, start + timedelta(milliseconds=800))
        _copy(cursor, "runs_runstep", step_cols, steps())
        usage_cols = ["id", "org_id", "created_at", "updated_at", "run_id", "crew_id", "agent_id", "provider", "model",
                      "input_tokens", "cached_tokens", "output_tokens", "cost_usd", "price_source", "latency_ms"]
        models = [("openai", "gpt-4o-mini"), ("openai", "gpt-4o"), ("anthropic", "claude-sonnet-4"),
                  ("openai_compatible", "my-llama")]

        def usage():
            for r in plan:
                for k in range(per_run_calls):
                    provider, model = models[(r.n + k) % len(models)]
                    when = r.at + timedelta(seconds=k * 3)
                    yield (uuid.uuid4(), org.id, when, when, r.id, r.crew_id, r.agent_id, provider, model,
                           1000, 100, 50,
                           None if model == "my-llama" else Decimal("0.00123"),
                           "unknown" if model == "my-llama" else "genai-prices", 800)
        _copy(cursor, "costs_usagerecord", usage_cols, usage())
        event_cols = ["run_id", "seq", "type", "data", "at"]
        types = ["run.queued", "run.started", "agent.started", "llm.completed", "tool.requested", "tool.decided",
                 "tool.dispatched", "tool.completed", "agent.finished", "run.finished"]

        def run_events():
            for r in plan:
                for seq in range(1, per_run_events + 1):
                    yield (r.id, seq, types[(seq - 1) % len(types)], json.dumps({"n": seq}),
                           r.at + timedelta(seconds=seq))
        _copy(cursor, "runs_runevent", event_cols, run_events())
        call_cols = ["id", "org_id", "created_at", "updated_at", "run_id", "step_id", "call_id", "position",
                     "qualified_name", "model_tool_name", "arguments", "args_hash", "definition_hash", "state",
                     "decision", "rule",
                     "reason", "error", "error_class", "findings", "idempotency_key", "attempts", "resolved_by"]
        first_llm = dict(first_model_calls(cursor, org.id))

        def ledger():
            for r in plan:
                held = r.n % 20 == 0
                for k in range(2):
                    yield (uuid.uuid4(), org.id, r.at, r.at, r.id, first_llm[r.id], f"c{k}", k,
                           "orders.get_order_status", "orders__get_order_status",
                           json.dumps({"order_id": f"A-{r.n:06d}"}), "0" * 64, "",
                           "held" if held and k else "succeeded", "hold" if held and k else "allow", "grant", "",
                           "", "", json.dumps([{"message": "injection"}] if r.n % 100 == 0 and k == 0 else []),
                           f"airlock-{r.n}-{k}", 1, "")
        _copy(cursor, "runs_toolcall", call_cols, ledger())
        # held rows point at an approval in the real system; the partial index keys on approval_id
        cursor.execute("""
            INSERT INTO approvals_approvalrequest (id, org_id, created_at, updated_at, kind, status, run_id,
                tool_call_id, title, arguments, args_hash, definition_hash, risk, reason, rule, context,
                required_approvals, decided_by_label, comment, approved_args_hash, separation_of_duties)
            SELECT gen_random_uuid(), t.org_id, t.created_at, t.created_at, 'tool_call', 'approved', t.run_id, t.id,
                   t.qualified_name, t.arguments, t.args_hash, '', 'write', 'held', 'grant',
                   jsonb_build_object('crew', r.crew_name, 'agent', 'Agent'), 1, 'bench@example.com', '', '', false
            FROM runs_toolcall t JOIN runs_run r ON r.id = t.run_id
            WHERE t.state = 'held'""")  # the context the runs' ledger records (apps/runs/ledger.py hold_call)
        cursor.execute("""UPDATE runs_toolcall t SET approval_id = a.id FROM approvals_approvalrequest a
                          WHERE a.tool_call_id = t.id""")
        cursor.execute("""UPDATE approvals_approvalrequest SET decided_at = created_at + interval '20 minutes'""")
    pg.commit()
    from apps.costs import rollup

    rollup.rebuild(using=connection)  # the same SQL as the migration's backfill
    pg.commit()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return {"runs": runs, "model_calls": runs * per_run_calls, "events": runs * per_run_events,
            "tool_calls": runs * 2}


def first_model_calls(cursor, org_id):
    cursor.execute("SELECT run_id, id FROM runs_runstep WHERE org_id = %s AND position = 2", [org_id])
    yield from cursor.fetchall()


# --- measuring -----------------------------------------------------------------------------------

def queries(org_id, sample_runs: list, crew_id) -> dict[str, tuple[Callable[[], object], Callable[[], str]]]:
    """name -> (what the page runs, the EXPLAIN of its main query)."""
    from apps.costs import selectors as costs
    from apps.runs import history, page_read, selectors
    from apps.runs.history import RunFilters

    since, until = costs.parse_range(None, None)  # the costs page default: the last 30 days

    def run_list(filters: RunFilters):
        def page():
            runs = history.search_runs(org_id=org_id, filters=filters)
            return list(runs[:51]), history.count_runs(runs)
        return page, lambda: history.search_runs(org_id=org_id, filters=filters)[:51].explain(analyze=True,
                                                                                               buffers=True)

    def detail():
        page = page_read.run_page(org_id=org_id, run_id=random.choice(sample_runs), events_shown=100)
        return (selectors.run_tree(page.rows), history.waterfall(page.run, page.rows),
                history.spend_by_agent(page.rows), list(selectors.run_events(run=page.run)))

    def detail_plan():
        run = selectors.get_run(org_id=org_id, run_id=sample_runs[0])
        return selectors.run_events(run=run).explain(analyze=True, buffers=True)

    def costs_page():
        return (costs.spend_by(org_id=org_id, group_by="day", since=since, until=until),
                costs.spend_breakdowns(org_id=org_id, group_bys=["crew", "agent", "model", "provider"], since=since,
                                       until=until),
                list(history.top_runs(org_id=org_id, since=since, until=until)),
                history.successful_run_cost(org_id=org_id, since=since, until=until),
                history.approval_waits(org_id=org_id, since=since, until=until))

    def costs_plan():
        from apps.costs.selectors import _rollup_groups

        first, end = since.date(), until.date()  # the default range is whole days: the rollup alone
        return _rollup_groups(org_id, "day", first, end).explain(analyze=True, buffers=True)

    return {
        "run list (newest)": run_list(RunFilters()),
        "run list (crew)": run_list(RunFilters(crew_id=crew_id)),
        "run list (status failed, by cost)": run_list(RunFilters(status="failed", sort="cost")),
        "run list (has held calls)": run_list(RunFilters(held=True)),
        "run list (has findings)": run_list(RunFilters(findings=True)),
        "run list (most tokens)": run_list(RunFilters(sort="tokens")),
        "run list (crew, by cost)": run_list(RunFilters(crew_id=crew_id, sort="cost")),
        "run list (search)": run_list(RunFilters(q="A-004242")),
        "run list (search, common word)": run_list(RunFilters(q="refunded")),
        "run detail": (detail, detail_plan),
        "costs: spend per day": (lambda: costs.spend_by(org_id=org_id, group_by="day", since=since, until=until),
                                 costs_plan),
        "costs page (all queries)": (costs_page, costs_plan),
    }


def measure(fn: Callable[[], object], samples: int) -> list[float]:
    fn()  # warm
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "var" / "bench" / "history.json"))
    parser.add_argument("--reuse", action="store_true",
                        help=f"load into (or reuse the load of) the kept database {KEPT_NAME}, and keep it")
    parser.add_argument("--no-plans", action="store_true")
    args = parser.parse_args(argv)

    with _database(args.reuse) as url:
        _setup_django(url)
        return _measure(args)


def _measure(args) -> dict:
    started = time.perf_counter()
    loaded = load(runs=args.runs, events=args.events, calls=args.calls)
    load_s = time.perf_counter() - started
    print(f"loaded {loaded} in {load_s:.0f} s")

    from apps.runs.models import Run

    org_id = Run.objects.values_list("org_id", flat=True).first()
    sample = list(Run.objects.filter(org_id=org_id).order_by("?").values_list("id", flat=True)[:200])
    crew_id = Run.objects.filter(org_id=org_id).values_list("crew_id", flat=True).first()
    results = []
    print(f"\n{'query':<38} {'p50 ms':>8} {'p95 ms':>8}  target p95 < {TARGET_MS:.0f} ms")
    for name, (fn, plan) in queries(org_id, sample, crew_id).items():
        times = measure(fn, args.samples)
        p50, p95 = statistics.median(times), quantile(times, 0.95)
        ok = "ok" if p95 < TARGET_MS else "OVER"
        print(f"{name:<38} {p50:>8.1f} {p95:>8.1f}  {ok}")
        results.append({"query": name, "p50_ms": round(p50, 2), "p95_ms": round(p95, 2),
                        "within_target": p95 < TARGET_MS, "plan": None if args.no_plans else plan()})
    if not args.no_plans:
        for row in results:
            print(f"\n== EXPLAIN {row['query']}\n{row['plan']}")
    report = {"benchmark": "history", "loaded": loaded, "load_seconds": round(load_s, 1), "target_p95_ms": TARGET_MS,
              "samples": args.samples, "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
