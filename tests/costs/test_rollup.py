"""The daily rollup agrees with the usage rows it summarises: per group, for whole days and for ranges
that start or end inside a day, after live increments and after a rebuild; monthly budgets read it;
two workers recording at once lose no call."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import uuid4

import pytest
from django.db import connection
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.costs import rollup, selectors, services
from apps.costs.models import Budget, DailySpend, UsageRecord
from tests.factories import make_org

pytestmark = pytest.mark.django_db

NOW = timezone.now()
MIDNIGHT = datetime(NOW.year, NOW.month, NOW.day, tzinfo=UTC)
BASE = MIDNIGHT - timedelta(days=4)
MODELS = [("openai_compatible", "my-llama"), ("openai", "gpt-4o-mini"), ("openai_compatible", "mystery")]


def history(org, owner) -> dict[str, list]:
    """Three crews, four agents, three models (one never priced, one repriced mid-way), runs crossing
    midnight, agents sharing runs, and calls with no run, crew or agent (the gateway's)."""
    actor = member_actor(owner)
    services.set_model_price(actor=actor, model="my-llama", input_per_mtok=Decimal(2), output_per_mtok=Decimal(4),
                             cached_per_mtok=Decimal(1), effective_from=BASE - timedelta(days=30))
    services.set_model_price(actor=actor, model="my-llama", provider="openai_compatible", input_per_mtok=Decimal(3),
                             output_per_mtok=Decimal(6), effective_from=BASE + timedelta(days=2))
    crews, agents = [uuid4() for _ in range(3)], [uuid4() for _ in range(4)]
    calls = []
    for n in range(24):
        run, crew = uuid4(), crews[n % 3]
        start = BASE + timedelta(hours=7 * n + 3)  # every few runs straddle midnight
        for k in range(5):
            provider, model = MODELS[(n + k) % 3] if k != 4 else MODELS[n % 2]
            agent = agents[(n + k // 2) % 4]
            calls.append(dict(run_id=run, crew_id=crew, agent_id=agent, provider=provider, model=model,
                              at=start + timedelta(minutes=50 * k), input_tokens=1000 + 10 * k,
                              cached_tokens=100 * (k % 2), output_tokens=50 + n))
    for n in range(4):
        calls.append(dict(run_id=None, crew_id=None, agent_id=None, provider="openai", model="gpt-4o-mini",
                          at=BASE + timedelta(days=n, hours=12), input_tokens=500, cached_tokens=0, output_tokens=5))
    calls.sort(key=lambda c: c["at"])
    for call in calls:
        services.record_usage(org_id=org.id, **call)
    return {"crews": crews, "agents": agents}


RANGES = [
    (None, None),
    (BASE - timedelta(days=1), MIDNIGHT + timedelta(days=1)),  # whole days: the rollup alone
    (BASE + timedelta(days=1), BASE + timedelta(days=3)),
    (BASE + timedelta(hours=13, minutes=20), BASE + timedelta(days=2, hours=5)),  # both ends inside a day
    (BASE + timedelta(days=1, hours=2), None),
    (None, BASE + timedelta(days=2, hours=22)),
    (BASE + timedelta(days=1, hours=3), BASE + timedelta(days=1, hours=9)),  # inside one day
]


def test_the_rollup_and_the_usage_rows_give_the_same_numbers(org, owner):
    history(org, owner)
    _copy_some(make_org("Initech"), org)  # another org's calls never leak in
    assert DailySpend.objects.filter(org=org).count() > 20
    for since, until in RANGES:
        window = {"org_id": org.id, "since": since, "until": until}
        for group_by in selectors.GROUPS:
            fast = selectors.spend_by(group_by=group_by, **window)
            assert fast == selectors.spend_by(group_by=group_by, from_rows=True, **window), (group_by, since, until)
        assert selectors.spend_total(**window) == selectors.spend_total(from_rows=True, **window)
        total, by = selectors.spend_breakdowns(group_bys=["crew", "agent", "model", "provider"], **window)
        assert total == selectors.spend_total(**window)
        assert by == {g: selectors.spend_by(group_by=g, **window) for g in by}  # the costs page's one read

    everything = selectors.spend_total(org_id=org.id)
    raw = UsageRecord.objects.filter(org=org)
    assert everything.calls == raw.count() == 124
    assert everything.unknown_calls == raw.filter(cost_usd__isnull=True).count() > 0
    assert everything.cost_usd == sum(r.cost_usd for r in raw if r.cost_usd is not None)
    assert everything.runs == 24  # each run once, though some ran on two days, with two agents and three models
    per_day = selectors.spend_by(org_id=org.id, group_by="day")
    assert sum(d.runs for d in per_day) == 24 and len(per_day) >= 5
    by_crew = selectors.spend_by(org_id=org.id, group_by="crew")
    assert sum(r.runs for r in by_crew) == 24 and "(no crew)" in {r.label for r in by_crew}
    assert selectors.spend_by(org_id=org.id, group_by="model")[-1].cost_usd is None  # mystery: unknown, not $0


def _copy_some(other, org) -> None:
    for call in UsageRecord.objects.filter(org=org)[:7]:
        services.record_usage(org_id=other.id, provider=call.provider, model=call.model,
                              input_tokens=call.input_tokens, output_tokens=call.output_tokens, at=call.created_at)


def test_a_rebuild_from_the_usage_rows_writes_what_the_increments_did(org, owner):
    history(org, owner)
    other = make_org("Initech")
    services.record_usage(org_id=other.id, provider="openai", model="gpt-4o-mini", input_tokens=10, output_tokens=1)
    columns = ("day", "crew_id", "agent_id", "provider", "model", *rollup.COUNTERS)
    live = sorted(DailySpend.objects.filter(org=org).values_list(*columns))
    written = rollup.rebuild(using=connection, org_id=org.id)
    assert written == len(live)
    assert sorted(DailySpend.objects.filter(org=org).values_list(*columns)) == live
    assert DailySpend.objects.filter(org=other).count() == 1  # another org's rows untouched
    rollup.rebuild()
    assert sorted(DailySpend.objects.filter(org=org).values_list(*columns)) == live


def test_monthly_budgets_read_the_rollup_and_match_the_rows(org, owner):
    ids = history(org, owner)
    actor = member_actor(owner)
    month = selectors.month_start()
    raw = UsageRecord.objects.filter(org=org, created_at__gte=month)
    for scope, target, rows_of in [("org", None, raw), ("crew", ids["crews"][1], raw.filter(crew_id=ids["crews"][1])),
                                   ("agent", ids["agents"][2], raw.filter(agent_id=ids["agents"][2]))]:
        budget = services.set_budget(actor=actor, scope=scope, target_id=target, amount_usd="1000")
        expected = sum((r.cost_usd for r in rows_of if r.cost_usd is not None), Decimal(0))
        assert selectors.spent(budget) == expected
    assert Budget.objects.filter(org=org).count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_workers_recording_at_once_lose_no_call(org):
    barrier = threading.Barrier(2)
    errors = []

    def worker():
        try:
            barrier.wait()
            for _ in range(15):
                services.record_usage(org_id=org.id, provider="openai", model="gpt-4o-mini", input_tokens=100,
                                      output_tokens=10)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    day = DailySpend.objects.get(org=org)
    assert (day.calls, day.input_tokens, day.output_tokens) == (30, 3000, 300)
    assert day.cost_usd == sum(UsageRecord.objects.filter(org=org).values_list("cost_usd", flat=True))


@pytest.mark.stack  # row locks: SQLite locks the whole database for a write
@pytest.mark.django_db(transaction=True)
def test_runs_of_one_crew_recording_at_once_do_not_wait_for_each_others_spend_row(org):
    """A model call adds to its day's spend inside its step's transaction, which holds that row until the step
    commits. Two runs of one crew with the same agent and model record at the same time without one waiting for
    the other, and the costs read both."""
    from django.db import transaction

    crew, agent = uuid4(), uuid4()
    by_stripe: dict[int, object] = {}
    while len(by_stripe) < 2:
        run = uuid4()
        by_stripe.setdefault(rollup.stripe_of(run), run)
    first, second = by_stripe.values()

    def record(run) -> None:
        services.record_usage(org_id=org.id, provider="openai", model="gpt-4o-mini", input_tokens=100,
                              output_tokens=10, run_id=run, crew_id=crew, agent_id=agent)

    holding, release, errors = threading.Event(), threading.Event(), []

    def first_step():
        try:
            with transaction.atomic():
                record(first)
                holding.set()
                release.wait(20)  # the rest of the step, not committed yet
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=first_step)
    holder.start()
    try:
        assert holding.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '3s'")  # waiting for the first run's row fails here
            record(second)
    finally:
        release.set()
        holder.join()
    assert not errors
    [by_crew] = selectors.spend_by(org_id=org.id, group_by="crew", since=MIDNIGHT)
    assert (by_crew.calls, by_crew.runs) == (2, 2)
