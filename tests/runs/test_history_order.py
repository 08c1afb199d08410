"""The run list's text search and sorts give the same runs in the same order however the query is answered:
a rare word (its matches fetched by id first) and a common one (the newest runs walked), cost with unknown
prices last, tokens, each with the newest first among equals. Rows are written directly, as bench/history.py
loads them: the order is the point, not how a run got its cost."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.runs import history
from apps.runs.history import RunFilters
from apps.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(org):
    now = timezone.now()
    rows = [Run(org=org, crew_name="Desk", status="failed" if n % 3 == 0 else "succeeded",
                inputs={"order_id": f"A-{n:04d}"}, output=f"Order A-{n:04d} refunded." if n % 2 else "Closed.",
                cost_usd=None if n % 7 == 0 else Decimal(n % 5), tokens_in=(n * 37) % 11,
                created_at=now - timedelta(minutes=n)) for n in range(60)]
    Run.objects.bulk_create(rows)
    return rows


def newest(run) -> float:
    return -run.created_at.timestamp()


def ids(queryset) -> list[str]:
    return [str(run.id) for run in queryset]


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
                                       lambda r: (r.cost_usd is None, -(r.cost_usd or 0), newest(r)))
    assert history.count_runs(history.search_runs(org_id=org.id, filters=RunFilters(q="refunded"))) == (30, False)


def test_the_cost_and_token_sorts_put_the_most_first_unknown_prices_last_and_the_newest_first_among_equals(
        org, runs):
    by_cost = history.search_runs(org_id=org.id, filters=RunFilters(sort="cost"))
    assert ids(by_cost) == expected(runs, lambda r: True,
                                    lambda r: (r.cost_usd is None, -(r.cost_usd or 0), newest(r)))
    by_tokens = history.search_runs(org_id=org.id, filters=RunFilters(sort="tokens", status="succeeded"))
    assert ids(by_tokens) == expected(runs, lambda r: r.status == "succeeded",
                                      lambda r: (-r.tokens_in, newest(r)))
    now = timezone.now()
    top = history.top_runs(org_id=org.id, since=now - timedelta(days=1), until=now + timedelta(minutes=1), limit=5)
    assert ids(top) == expected(runs, lambda r: (r.cost_usd or 0) > 0,
                                lambda r: (-(r.cost_usd or 0), newest(r)))[:5]
