"""The run list's text search and sorts give the same runs in the same order however the query is answered:
a rare word (its matches fetched by id first) and a common one (the newest runs walked), cost and tokens by the
figures a run ended with (runs still going and unknown prices after those), each with the newest first among
equals. Rows are written directly, as bench/history.py loads them: the order is the point, not how a run got its
cost."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.runs import history, ledger
from apps.runs.history import RunFilters
from apps.runs.ledger import Totals
from apps.runs.models import FINISHED, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(org):
    now = timezone.now()
    rows = [Run(org=org, crew_name="Desk", status=("running" if n % 5 == 4 else "waiting" if n % 11 == 10 else
                                                   "failed" if n % 3 == 0 else "succeeded"),
                inputs={"order_id": f"A-{n:04d}"}, output=f"Order A-{n:04d} refunded." if n % 2 else "Closed.",
                cost_usd=None if n % 7 == 0 else Decimal(n % 5), tokens_in=(n * 37) % 11,
                created_at=now - timedelta(minutes=n)) for n in range(60)]
    Run.objects.bulk_create(rows)
    return rows


def newest(run) -> float:
    return -run.created_at.timestamp()


def ids(queryset) -> list[str]:
    return [str(run.id) for run in queryset]


def final(run, figure: str):
    """What the sorts order by: the run's cost or input tokens once it has ended, None while it is going."""
    return getattr(run, figure) if run.status in FINISHED else None


def most_first(figure: str):
    return lambda r: (final(r, figure) is None, -(final(r, figure) or 0), newest(r))


def expected(rows, keep, key) -> list[str]:
    return [str(r.id) for r in sorted((r for r in rows if keep(r)), key=key)]


@pytest.mark.parametrize("few", [1_000, 2])  # all matches fetched by id; more matches than that: the walk
def test_a_search_lists_every_match_newest_first_whether_its_word_is_rare_or_common(org, runs, monkeypatch, few):
    monkeypatch.setattr(history, "FEW_MATCHES", few)
    for word, keep in (("A-0013", lambda r: r.inputs["order_id"] == "A-0013"),
                       ("refunded", lambda r: "refunded" in r.output)):
        found = history.search_runs(org_id=org.id, filters=RunFilters(q=word))
        assert ids(found) == expected(runs, keep, newest), word
        failed = history.search_runs(org_id=org.id, filters=RunFilters(q=word, status="failed", sort="cost"))
        assert ids(failed) == expected(runs, lambda r, keep=keep: keep(r) and r.status == "failed",
                                       most_first("cost_usd"))
    assert history.count_runs(history.search_runs(org_id=org.id, filters=RunFilters(q="refunded"))) == (30, False)


def test_the_cost_and_token_sorts_put_the_most_first_then_runs_still_going_and_unknown_prices_newest_first(
        org, runs):
    by_cost = history.search_runs(org_id=org.id, filters=RunFilters(sort="cost"))
    assert ids(by_cost) == expected(runs, lambda r: True, most_first("cost_usd"))
    by_tokens = history.search_runs(org_id=org.id, filters=RunFilters(sort="tokens"))
    assert ids(by_tokens) == expected(runs, lambda r: True, most_first("tokens_in"))
    succeeded = history.search_runs(org_id=org.id, filters=RunFilters(sort="tokens", status="succeeded"))
    assert ids(succeeded) == expected(runs, lambda r: r.status == "succeeded", most_first("tokens_in"))
    now = timezone.now()
    top = history.top_runs(org_id=org.id, since=now - timedelta(days=1), until=now + timedelta(minutes=1), limit=60)
    assert ids(top) == expected(runs, lambda r: (r.cost_usd or 0) > 0, most_first("cost_usd"))


def test_a_run_takes_its_place_in_the_cost_and_token_sorts_when_it_ends(org, runs):
    going = next(r for r in runs if r.status == "running" and r.cost_usd is not None)
    ledger.append_events(going.id, [("llm.completed", {"tokens_in": 999})],  # its counters move as it runs
                         Totals(tokens_in=999 - going.tokens_in, cost_usd=Decimal(99) - going.cost_usd))
    assert ids(history.search_runs(org_id=org.id, filters=RunFilters(sort="cost")))[0] != str(going.id)

    ledger.finish_run(going.id, org_id=org.id, status="succeeded")
    for sort in ("cost", "tokens"):
        assert ids(history.search_runs(org_id=org.id, filters=RunFilters(sort=sort)))[0] == str(going.id), sort
    assert history.successful_run_cost(org_id=org.id, since=timezone.now() - timedelta(days=1),
                                       until=timezone.now()).cost_usd == sum(
        (r.cost_usd or 0 for r in runs if r.status == "succeeded"), Decimal(99))
