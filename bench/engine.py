"""The "ours" column of bench/run.py for the engine: Airlock's run engine with the scripted model and a trivial
tool, every step committed to Postgres. Imported by bench/run.py after Django is set up on the bench database.

- `setup()` migrates, creates an org, the `bench` stdio MCP server (bench/lookup_server.py: `lookup(n)`
  returns 2 KB of text, a read the grant allows without a person), a scripted connection, and per size a
  sequential crew of one agent whose script calls `bench.lookup` n = 0 .. size-1, one call per model turn,
  then says done; the same per size with `bench.record` (a write, granted `auto`: the write-step metric);
  plus a crew whose tool needs a person's approval (the resume metric).
- `steps(...)` runs each crew inline with `services.start_run` + `run_worker.drive_run` (the same engine a
  worker runs, in this process; the MCP session stays open in this process's pool, as in a warm worker)
  and records the time between consecutive model calls, the same interval the LangGraph side records
  (`step_ms`), the time spent inside the MCP tool call per step (`tool_ms`: from `Pool.start_call` to its
  `PendingCall.result()` returning, wrapped here like the scripted model: the pool's hop to its loop thread,
  the stdio round trip, the result; a read leaves with its commit, so that commit's round trip overlaps it)
  and their difference (`net_ms`: the platform's own per-step work, what bench/run.py compares with LangGraph's
  step minus its tool); per run, its whole time (`run_ms`), the time from `start_run` to the first model call
  (`first_ms`), and on Postgres the WAL it wrote (`wal_bytes`: pg_wal_lsn_diff around the run, server-wide)
  and how much the database grew (`grown_bytes`: pg_database_size around the run).
- `stored_bytes(run_id)`: pg_column_size of every row the run left (run, steps, ledger, events, usage,
  audit, approvals).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_CALLS: list[float] = []
TOOL_CALLS: list[tuple[float, float]] = []  # (entered, left) of every MCP tool call, perf_counter


@dataclass
class Setup:
    org_id: str
    owner_id: int
    user_id: int
    crews: dict[int, str]  # steps -> crew id
    hold_crew: str
    server_id: str
    write_crews: dict[int, str]  # steps -> crew id, calling bench.record (a write)


TOOLS = {"lookup": "bench.lookup", "record": "bench.record"}


def _script(size: int, tool: str = "bench.lookup") -> list[dict]:
    return [*({"call": [{"tool": tool, "args": {"n": n}}]} for n in range(size)),
            {"say": "done\nSTATUS: done\nREASON: all looked up"}]


def setup(sizes: list[int]) -> Setup:
    from apps.accounts import services as accounts
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership
    from apps.agents import services as agents
    from apps.agents.models import Agent
    from apps.approvals.definition_changes import inbox
    from apps.crews import services as crews
    from apps.registry import services as registry

    user = accounts.ensure_user(email="bench@example.com", password="bench-password-123")
    org, _, _ = accounts.create_organization(name="Bench", owner_email=user.email)
    owner = Membership.objects.select_related("user", "org").get(org=org, role="owner")
    actor = member_actor(owner)
    server = registry.create_server(actor=actor, name="bench", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "bench.lookup_server"], cwd=str(ROOT),
                                    sync=False)
    report = registry.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    connection = agents.create_connection(actor=actor, name="Scripted", provider="scripted")
    crew_ids: dict[str, dict[int, str]] = {"lookup": {}, "record": {}}
    for (tool, name), size in itertools.product(TOOLS.items(), sizes):
        agent = agents.create_agent(actor=actor, name=f"{tool} {size}", connection_id=connection.id,
                                    script=_script(size, name), grants=[{"tool": name, "policy": "auto"}])
        # the product caps a turn at 100 model calls; the 100-step run needs 101 (100 calls and the answer)
        Agent.objects.filter(id=agent.id).update(max_steps=size + 1)
        crew = crews.create_crew(actor=actor, name=f"Steps {tool} {size}", process="sequential",
                                 max_tool_calls=1000, timeout_s=3600,
                                 tasks=[{"name": tool, "agent_id": agent.id, "description": f"{tool} everything."}])
        crew_ids[tool][size] = str(crew.id)
    holder = agents.create_agent(actor=actor, name="Holder", connection_id=connection.id, script=_script(1),
                                 grants=[{"tool": "bench.lookup", "policy": "approve"}])
    hold = crews.create_crew(actor=actor, name="Held", process="sequential",
                             tasks=[{"name": "look", "agent_id": holder.id, "description": "Look it up."}])
    return Setup(org_id=str(org.id), owner_id=owner.id, user_id=user.id, crews=crew_ids["lookup"],
                 hold_crew=str(hold.id), server_id=str(server.id), write_crews=crew_ids["record"])


def _instrument() -> None:
    """Stamps every scripted model call (the engine looks `play_turn` up at call time, as a module global) and
    times every MCP tool call (every one starts at `Pool.start_call`)."""
    from apps.agents import scripted
    from apps.registry.pool import Pool

    if not getattr(scripted.play_turn, "_bench", False):
        original_turn = scripted.play_turn

        def play_turn(*args, **kwargs):
            MODEL_CALLS.append(time.perf_counter())
            return original_turn(*args, **kwargs)

        play_turn._bench = True
        scripted.play_turn = play_turn
    if not getattr(Pool.start_call, "_bench", False):  # every tool call starts here, early reads too
        original_start = Pool.start_call

        def start_call(self, *args, **kwargs):
            entered = time.perf_counter()
            pending = original_start(self, *args, **kwargs)
            original_result = pending.result

            def result():
                try:
                    return original_result()
                finally:
                    TOOL_CALLS.append((entered, time.perf_counter()))

            pending.result = result
            return pending

        start_call._bench = True
        Pool.start_call = start_call


def _tool_ms(calls: list[float], tool_calls: list[tuple[float, float]]) -> list[float]:
    """Per step (model call k -> k+1): the time spent inside tool calls that started in it (retries too), in ms."""
    return [sum(left - entered for entered, left in tool_calls if a <= entered < b) * 1000
            for a, b in itertools.pairwise(calls)]


def actor_for(s: Setup):
    from apps.accounts.actors import member_actor
    from apps.accounts.models import Membership

    return member_actor(Membership.objects.select_related("user", "org").get(id=s.owner_id))


def one_run(s: Setup, size: int, tool: str = "lookup") -> tuple[str, float, list[float], list[float], float]:
    """(run id, total ms, step intervals in ms, tool call ms per step, start -> first model call in ms) of one
    run of `size` steps calling `tool` (lookup or record), inline."""
    from apps.runs import services
    from apps.runs import worker as run_worker

    _instrument()
    MODEL_CALLS.clear()
    TOOL_CALLS.clear()
    started = time.perf_counter()
    crew = (s.write_crews if tool == "record" else s.crews)[size]
    run = services.start_run(actor=actor_for(s), crew_id=crew, inputs={}, enqueue=False)
    run = run_worker.drive_run(run_id=run.id, max_tasks=1000)
    total = (time.perf_counter() - started) * 1000
    assert run.status == "succeeded", (run.status, run.error)
    assert len(MODEL_CALLS) == size + 1 and len(TOOL_CALLS) >= size, (len(MODEL_CALLS), len(TOOL_CALLS))
    return (str(run.id), total, [(b - a) * 1000 for a, b in itertools.pairwise(MODEL_CALLS)],
            _tool_ms(MODEL_CALLS, TOOL_CALLS), (MODEL_CALLS[0] - started) * 1000)


BYTES_SQL = """
SELECT (SELECT coalesce(sum(pg_column_size(r.*)), 0) FROM runs_run r WHERE r.id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM runs_runstep s WHERE s.run_id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(m.*)), 0) FROM runs_runmessage m
        JOIN runs_runstep s ON s.id = m.turn_id WHERE s.run_id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM runs_toolcall t WHERE t.run_id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM runs_runevent e WHERE e.run_id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(u.*)), 0) FROM costs_usagerecord u WHERE u.run_id = %(r)s)
     + (SELECT coalesce(sum(pg_column_size(a.*)), 0) FROM audit_auditevent a WHERE a.target_id = %(r)s::text)
     + (SELECT coalesce(sum(pg_column_size(p.*)), 0) FROM approvals_approvalrequest p WHERE p.run_id = %(r)s)
"""
ROWS_SQL = """
SELECT (SELECT count(*) FROM runs_runstep WHERE run_id = %(r)s), (SELECT count(*) FROM runs_toolcall
        WHERE run_id = %(r)s), (SELECT count(*) FROM runs_runevent WHERE run_id = %(r)s),
       (SELECT count(*) FROM costs_usagerecord WHERE run_id = %(r)s)
"""


def stored_bytes(run_id: str) -> tuple[int, dict[str, int]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(BYTES_SQL, {"r": run_id})
        total = int(cursor.fetchone()[0])
        cursor.execute(ROWS_SQL, {"r": run_id})
        rows = dict(zip(("runs_runstep", "runs_toolcall", "runs_runevent", "costs_usagerecord"), cursor.fetchone(),
                        strict=True))
    return total, rows


def written_marks() -> tuple[str, int]:
    """(WAL insert position, database size): written_bytes() of two of them is what was written in between."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text, pg_database_size(current_database())")
        lsn, size = cursor.fetchone()
    return lsn, int(size)


def written_bytes(before: tuple[str, int], after: tuple[str, int]) -> tuple[int, int]:
    """(WAL bytes, database growth in bytes) between two written_marks()."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (after[0], before[0]))
        return int(cursor.fetchone()[0]), after[1] - before[1]


def table_sizes() -> dict[str, int]:
    """pg_total_relation_size of every table of the database (with its indexes and TOAST)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables")
        return dict(cursor.fetchall())


def growth_by_table(s: Setup, size: int) -> dict[str, int]:
    """The tables one run of `size` steps made grow, in bytes, largest first."""
    with as_a_worker():
        before = table_sizes()
        one_run(s, size)
        after = table_sizes()
    grown = {name: after[name] - before.get(name, 0) for name in after}
    return {name: grown[name] for name in sorted(grown, key=grown.get, reverse=True) if grown[name]}


@contextmanager
def as_a_worker() -> Iterator[None]:
    """The engine inline with a worker's database session (apps/core/db.py: generic plans allowed); the
    connection is closed after, so what this process does next (a person's decision) runs as the web does."""
    from django.db import connection
    from django.db.backends.signals import connection_created

    from apps.core.db import RECEIVER_UID, allow_generic_plans

    allow_generic_plans()
    try:
        yield
    finally:
        connection_created.disconnect(dispatch_uid=RECEIVER_UID)
        connection.close()


def steps(s: Setup, sizes: list[int], passes: int, bytes_size: int, tool: str = "lookup") -> dict:
    with as_a_worker():
        return _steps(s, sizes, passes, bytes_size, tool)


def _steps(s: Setup, sizes: list[int], passes: int, bytes_size: int, tool: str = "lookup") -> dict:
    from django.db import connection

    postgres = connection.vendor == "postgresql"  # the embedded mode (SQLite) has no WAL or column sizes
    out: dict = {"sizes": {}}
    one_run(s, min(sizes), tool)  # warm: the MCP session opens, imports and caches load
    for size in sizes:
        intervals, tool_ms, totals, firsts, stored, wal, grown, rows = [], [], [], [], [], [], [], None
        for _ in range(passes):
            before = written_marks() if postgres else None
            run_id, total, steps_ms, tools_ms, first_ms = one_run(s, size, tool)
            intervals += steps_ms
            tool_ms += tools_ms
            totals.append(total)
            firsts.append(first_ms)
            if postgres:
                wal_bytes, grown_bytes = written_bytes(before, written_marks())
                wal.append(wal_bytes)
                grown.append(grown_bytes)
                size_bytes, rows = stored_bytes(run_id)
                stored.append(size_bytes)
        out["sizes"][str(size)] = {"step_ms": intervals, "tool_ms": tool_ms,
                                   "net_ms": [step - call for step, call in zip(intervals, tool_ms, strict=True)],
                                   "run_ms": totals, "first_ms": firsts, "bytes": stored, "wal_bytes": wal,
                                   "grown_bytes": grown}
        if size == bytes_size:
            out["bytes"] = {"size": size, "per_run": stored, "rows": rows}
    return out
