"""The daily spend rollup (`DailySpend`): kept by `record_usage`, rebuilt from usage rows by `rebuild`.

One row per (org, UTC day, crew, agent, provider, model) with the sums the costs page shows. A
missing crew or agent is stored as `NO_ID` (the nil UUID): the key has no NULLs, so one unique
constraint and `INSERT ... ON CONFLICT DO UPDATE` work the same on Postgres and SQLite.

Runs are additive here, which a distinct count is not: a usage row counts its run (`runs`) when it
is the run's first call, and counts it for its agent, model or provider (`runs_agent`,
`runs_model`, `runs_provider`) when it is the run's first call with that agent, model or provider.
So a group's `runs` is the number of runs whose first call in that group falls in the range; a run
is counted once per group, in the period its first call there was made. "First" orders a run's
calls by (created_at, id); `first_calls` decides it for a new call and the window functions in
`rebuild` for history, the same way, and `selectors.spend_by` applies it to raw rows at the edges
of a range that does not start or end at midnight.

Each group's day is `STRIPES` rows, one per stripe of runs (`stripe_of`: the run id's last hex digit), and
every reader sums them. A call holds its row's lock until its step commits; striped, concurrent runs of one
crew rarely wait for each other, and one run's calls (the runs counters) stay on one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from uuid import UUID

from django.db import connection as default_connection
from django.db.models import Count, Q

from apps.costs.models import DailySpend, UsageRecord

NO_ID = UUID(int=0)
TABLE = "costs_dailyspend"
KEY = ("org_id", "day", "crew_id", "agent_id", "provider", "model", "stripe")
STRIPES = 8  # a divisor of 16: a hex digit maps onto the stripes evenly
COUNTERS = ("calls", "input_tokens", "cached_tokens", "output_tokens", "cost_usd", "unknown_calls",
            "runs", "runs_agent", "runs_model", "runs_provider")


# Only the constant names above are interpolated into the SQL below; values are always parameters.
UPSERT = (f"INSERT INTO {TABLE} ({', '.join((*KEY, *COUNTERS))}) "  # noqa: S608
          f"VALUES ({', '.join(['%s'] * (len(KEY) + len(COUNTERS)))}) ON CONFLICT ({', '.join(KEY)}) DO UPDATE SET "
          + ", ".join(f"{c} = {TABLE}.{c} + excluded.{c}" for c in COUNTERS))


def stripe_of(run_id: UUID | str | None) -> int:
    """The rollup row a run's calls add to (0 for a call outside a run). `rebuild` computes the same in SQL."""
    return int(UUID(str(run_id)).hex[-1], 16) % STRIPES if run_id else 0


@dataclass(frozen=True)
class FirstCalls:
    """Whether a new call is its run's first (overall, with its agent, its model, its provider)."""

    run: bool = False
    agent: bool = False
    model: bool = False
    provider: bool = False


def first_calls(*, org_id, run_id, agent_id, provider: str, model: str) -> FirstCalls:
    """Asked before the call's usage row is inserted (the engine holds the run's row lock meanwhile)."""
    if not run_id:
        return FirstCalls()
    same_agent = Q(agent_id=agent_id) if agent_id else Q(agent_id__isnull=True)
    before = UsageRecord.objects.filter(org_id=org_id, run_id=run_id).aggregate(
        run=Count("id"), agent=Count("id", filter=same_agent), model=Count("id", filter=Q(model=model)),
        provider=Count("id", filter=Q(provider=provider)))
    return FirstCalls(run=not before["run"], agent=not before["agent"], model=not before["model"],
                      provider=not before["provider"])


def increment(*, org_id, day: date, run_id, crew_id, agent_id, provider: str, model: str, input_tokens: int,
              cached_tokens: int, output_tokens: int, cost_usd: Decimal | None, firsts: FirstCalls,
              using=None) -> None:
    """Adds one call to its day's row: one upsert, inside the caller's transaction."""
    conn = using or default_connection
    fields = {f.attname: f for f in DailySpend._meta.concrete_fields}
    values = {"org_id": org_id, "day": day, "crew_id": crew_id or NO_ID, "agent_id": agent_id or NO_ID,
              "provider": provider, "model": model, "stripe": stripe_of(run_id), "calls": 1,
              "input_tokens": input_tokens, "cached_tokens": cached_tokens, "output_tokens": output_tokens,
              "cost_usd": cost_usd if cost_usd is not None else Decimal(0),
              "unknown_calls": int(cost_usd is None), "runs": int(firsts.run), "runs_agent": int(firsts.agent),
              "runs_model": int(firsts.model), "runs_provider": int(firsts.provider)}
    params = [fields[c].get_db_prep_save(values[c], conn) for c in (*KEY, *COUNTERS)]
    with conn.cursor() as cursor:
        cursor.execute(UPSERT, params)


def rebuild(*, using=None, org_id=None) -> int:
    """Recomputes the rollup from the usage rows (all orgs, or one): one DELETE, one INSERT ... SELECT.

    Used by the migration that created the table and by bench/history.py after its COPY load.
    Returns the number of rollup rows written.
    """
    conn = using or default_connection
    nil = DailySpend._meta.get_field("crew_id").get_db_prep_save(NO_ID, conn)
    # stripe_of in SQL: the run id's last hex digit (Postgres prints a uuid in lower case, SQLite stores its hex).
    if conn.vendor == "postgresql":
        day = "(created_at AT TIME ZONE 'UTC')::date"
        stripe = f"COALESCE((strpos('0123456789abcdef', right(run_id::text, 1)) - 1) %% {STRIPES}, 0)"
    elif conn.vendor == "sqlite":
        day = "date(created_at)"  # stored as UTC text
        stripe = f"COALESCE((instr('0123456789abcdef', lower(substr(run_id, -1))) - 1) %% {STRIPES}, 0)"
    else:  # pragma: no cover - Airlock runs on Postgres or SQLite
        raise NotImplementedError(conn.vendor)
    where, params = ("", [])
    if org_id is not None:
        where = " WHERE org_id = %s"
        params = [DailySpend._meta.get_field("org").get_db_prep_save(org_id, conn)]

    def first(*partition: str) -> str:
        return (f"CASE WHEN run_id IS NOT NULL AND row_number() OVER (PARTITION BY org_id, run_id"
                f"{''.join(', ' + p for p in partition)} ORDER BY created_at, id) = 1 THEN 1 ELSE 0 END")

    sql = f"""
        INSERT INTO {TABLE} ({', '.join(KEY)}, {', '.join(COUNTERS)})
        SELECT org_id, day, crew, agent, provider, model, stripe, COUNT(*), SUM(input_tokens), SUM(cached_tokens),
               SUM(output_tokens), SUM(COALESCE(cost_usd, 0)), SUM(CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END),
               SUM(first_run), SUM(first_agent), SUM(first_model), SUM(first_provider)
        FROM (SELECT org_id, {day} AS day, COALESCE(crew_id, %s) AS crew, COALESCE(agent_id, %s) AS agent,
                     provider, model, {stripe} AS stripe, input_tokens, cached_tokens, output_tokens, cost_usd,
                     {first()} AS first_run, {first('agent_id')} AS first_agent,
                     {first('model')} AS first_model, {first('provider')} AS first_provider
              FROM costs_usagerecord{where}) AS calls
        GROUP BY org_id, day, crew, agent, provider, model, stripe"""  # noqa: S608
    with conn.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}{where}", params)  # noqa: S608
        cursor.execute(sql, [nil, nil, *params])
        return cursor.rowcount
