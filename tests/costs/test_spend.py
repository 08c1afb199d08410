"""Spend aggregations against hand-computed numbers: overrides with effective dates, unknown prices
counted (never zero), the same rows on the costs page and from GET /api/v1/costs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import uuid4

import pytest
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.costs import selectors, services
from apps.costs.pricing import price_call
from tests.factories import token_for

pytestmark = pytest.mark.django_db

NOW = timezone.now()
DAY1 = datetime(NOW.year, NOW.month, NOW.day, 9, tzinfo=UTC) - timedelta(days=3)
DAY2 = DAY1 + timedelta(days=1)


def test_an_override_applies_from_its_date_and_a_newer_one_replaces_it(org, owner):
    actor = member_actor(owner)
    services.set_model_price(actor=actor, model="my-llama", input_per_mtok=Decimal(2), output_per_mtok=Decimal(4),
                             cached_per_mtok=Decimal(1), effective_from=NOW - timedelta(days=10))
    services.set_model_price(actor=actor, model="my-llama", provider="openai_compatible", input_per_mtok=Decimal(3),
                             output_per_mtok=Decimal(6), effective_from=NOW - timedelta(days=2))
    usage = {"input_tokens": 1_000_000, "cached_tokens": 200_000, "output_tokens": 500_000}

    before = price_call(org_id=org.id, provider="openai_compatible", model="my-llama", **usage,
                        at=NOW - timedelta(days=11))
    old = price_call(org_id=org.id, provider="openai_compatible", model="my-llama", **usage,
                     at=NOW - timedelta(days=5))
    new = price_call(org_id=org.id, provider="openai_compatible", model="my-llama", **usage, at=NOW)

    assert before.cost_usd is None and before.source == "unknown"  # no price yet: unknown, not zero
    assert old.cost_usd == Decimal("3.8")  # 0.8M x $2 + 0.2M cached x $1 + 0.5M x $4
    assert new.cost_usd == Decimal("6.0")  # no cached price: cached input at the input price, 1M x $3 + 0.5M x $6
    assert old.source != new.source and new.source.startswith("override:")


def test_the_price_that_applies_is_the_latest_and_of_two_from_one_moment_the_provider_s(org, owner):
    """Which of the org's prices applies to a call (read by the web, the gateway and, sent with its other reads,
    a run's worker): the latest in force at the call; at one moment, the one naming the call's provider over the
    one for any provider; never a later price, another provider's or another organisation's."""
    from apps.costs.pricing import find_override
    from tests.factories import make_org, owner_of

    actor, moment = member_actor(owner), NOW - timedelta(days=1)
    for provider, price in (("", 1), ("openai", 2), ("anthropic", 3)):
        services.set_model_price(actor=actor, model="m", provider=provider, input_per_mtok=Decimal(price),
                                 output_per_mtok=Decimal(price), effective_from=moment)
    services.set_model_price(actor=actor, model="m", input_per_mtok=Decimal(9), output_per_mtok=Decimal(9),
                             effective_from=NOW + timedelta(days=1))
    other = make_org("Initech")
    services.set_model_price(actor=member_actor(owner_of(other)), model="m", provider="mistral",
                             input_per_mtok=Decimal(7), output_per_mtok=Decimal(7), effective_from=NOW)

    def applies(provider, at=NOW):
        found = find_override(org_id=org.id, provider=provider, model="m", at=at)
        return found and found.input_per_mtok

    assert (applies("openai"), applies("anthropic"), applies("mistral")) == (2, 3, 1)
    assert applies("openai", at=NOW + timedelta(days=2)) == 9  # the later one, once in force, for any provider
    assert applies("openai", at=moment - timedelta(seconds=1)) is None
    assert find_override(org_id=org.id, provider="openai", model="other", at=NOW) is None


def _usage(org, *, at, crew, agent, run, model="my-llama", provider="openai_compatible", tokens=(1000, 0, 100)):
    return services.record_usage(org_id=org.id, provider=provider, model=model, input_tokens=tokens[0],
                                 cached_tokens=tokens[1], output_tokens=tokens[2], run_id=run, crew_id=crew,
                                 agent_id=agent, at=at)  # placed on its day, in the rollup too


@pytest.fixture
def ledger(org, owner):
    """Five calls over two days, two crews, two agents; one model has no price at all.

    my-llama at $2/M in, $4/M out, $1/M cached:
      day 1  crew A agent X run 1  1000 in (0 cached) / 100 out   -> 0.002 + 0.0004           = 0.0024
      day 1  crew A agent Y run 1  mystery model, no price        -> unknown
      day 1  crew A agent X run 2  2000 in (1000 cached) / 500 out-> 0.002 + 0.001 + 0.002    = 0.005
      day 2  crew B agent X run 3  1000 in / 100 out              -> 0.0024
      day 2  crew B agent Y run 3  mystery model                  -> unknown
    """
    services.set_model_price(actor=member_actor(owner), model="my-llama", input_per_mtok=Decimal(2),
                             output_per_mtok=Decimal(4), cached_per_mtok=Decimal(1),
                             effective_from=DAY1 - timedelta(days=30))
    ids = {name: uuid4() for name in ("A", "B", "X", "Y", "r1", "r2", "r3")}
    _usage(org, at=DAY1, crew=ids["A"], agent=ids["X"], run=ids["r1"])
    _usage(org, at=DAY1, crew=ids["A"], agent=ids["Y"], run=ids["r1"], model="mystery")
    _usage(org, at=DAY1, crew=ids["A"], agent=ids["X"], run=ids["r2"], tokens=(2000, 1000, 500))
    _usage(org, at=DAY2, crew=ids["B"], agent=ids["X"], run=ids["r3"])
    _usage(org, at=DAY2, crew=ids["B"], agent=ids["Y"], run=ids["r3"], model="mystery")
    return ids


def _by(rows):
    return {r.key: (r.runs, r.calls, r.tokens_in, r.tokens_cached, r.tokens_out, r.cost_usd, r.unknown_calls)
            for r in rows}


def test_spend_per_day_counts_unknown_calls_and_never_adds_them_as_zero(org, ledger):
    rows = selectors.spend_by(org_id=org.id, group_by="day", since=DAY1 - timedelta(days=1), until=NOW)
    assert _by(rows) == {
        DAY1.date().isoformat(): (2, 3, 4000, 1000, 700, Decimal("0.0074"), 1),
        DAY2.date().isoformat(): (1, 2, 2000, 0, 200, Decimal("0.0024"), 1),
    }


def test_spend_per_crew_agent_model_and_provider(org, ledger):
    window = {"since": DAY1 - timedelta(days=1), "until": NOW}
    crews = _by(selectors.spend_by(org_id=org.id, group_by="crew", **window))
    assert crews == {str(ledger["A"]): (2, 3, 4000, 1000, 700, Decimal("0.0074"), 1),
                     str(ledger["B"]): (1, 2, 2000, 0, 200, Decimal("0.0024"), 1)}
    agents = _by(selectors.spend_by(org_id=org.id, group_by="agent", **window))
    assert agents[str(ledger["X"])] == (3, 3, 4000, 1000, 700, Decimal("0.0098"), 0)
    assert agents[str(ledger["Y"])] == (2, 2, 2000, 0, 200, None, 2)  # every call unknown: unknown, not $0
    models = _by(selectors.spend_by(org_id=org.id, group_by="model", **window))
    assert models["mystery"][5] is None and models["my-llama"][5] == Decimal("0.0098")
    providers = _by(selectors.spend_by(org_id=org.id, group_by="provider", **window))
    assert providers == {"openai_compatible": (3, 5, 6000, 1000, 900, Decimal("0.0098"), 2)}
    total = selectors.spend_total(org_id=org.id, **window)
    assert (total.calls, total.cost_usd, total.unknown_calls) == (5, Decimal("0.0098"), 2)


def test_a_range_excludes_calls_outside_it(org, ledger):
    rows = selectors.spend_by(org_id=org.id, group_by="provider", since=DAY2, until=NOW)
    assert [(r.calls, r.cost_usd) for r in rows] == [(2, Decimal("0.0024"))]


def test_the_api_returns_the_page_numbers(client, org, ledger):
    token = token_for(org, "viewer")
    since = (DAY1 - timedelta(days=1)).date().isoformat()
    body = client.get(f"/api/v1/costs?group_by=crew&since={since}", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    expected = selectors.spend_by(org_id=org.id, group_by="crew", **dict(zip(
        ("since", "until"), selectors.parse_range(DAY1 - timedelta(days=1), None), strict=True)))
    assert [(r["key"], r["runs"], r["tokens_in"], r["tokens_out"], r["unknown_calls"]) for r in body] == \
        [(r.key, r.runs, r.tokens_in, r.tokens_out, r.unknown_calls) for r in expected]
    assert {r["key"]: Decimal(r["cost_usd"]) for r in body} == {str(ledger["A"]): Decimal("0.0074"),
                                                                str(ledger["B"]): Decimal("0.0024")}
    assert client.get("/api/v1/costs?group_by=colour", HTTP_AUTHORIZATION=f"Bearer {token}").status_code in (400,
                                                                                                             422)


def test_the_costs_page_labels_unknown_spend(client, org, owner, ledger):
    client.force_login(owner.user)
    since = (DAY1 - timedelta(days=1)).date().isoformat()
    page = client.get(f"/costs/?since={since}").content.decode()
    assert "$0.0098 + 2 calls at unknown price" in page
    assert "unknown (2 calls without a price)" in page  # agent Y, whose every call had no price
    assert 'id="spend-data"' in page and "spend-chart" in page


def test_admins_manage_prices_and_budgets_on_the_costs_page(client, org, owner, viewer):
    client.force_login(owner.user)
    response = client.post("/costs/prices/", {"model": "my-llama", "provider": "", "input_per_mtok": "2",
                                              "output_per_mtok": "4", "cached_per_mtok": "",
                                              "effective_from": NOW.date().isoformat(), "note": "self-hosted"})
    assert response.status_code == 302
    assert selectors.org_prices(org_id=org.id).get().note == "self-hosted"
    bad = client.post("/costs/budgets/", {"scope": "org", "amount_usd": "-3", "thresholds": "50, 80"})
    assert bad.status_code == 422 and "above zero" in bad.content.decode()
    client.post("/costs/budgets/", {"scope": "org", "amount_usd": "250", "thresholds": "50, 80"})
    budget = selectors.org_budgets(org_id=org.id).get()
    assert budget.amount_usd == Decimal("250") and budget.thresholds == [50, 80, 100]
    assert "$0.00 of $250.00 (0 %)" in client.get("/costs/").content.decode()
    client.force_login(viewer.user)
    assert client.post("/costs/budgets/", {"scope": "org", "amount_usd": "1"}).status_code == 403


def test_a_crossed_threshold_reaches_the_orgs_webhooks_once(org, owner):
    from apps.notifications import services as notifications
    from apps.notifications.models import Notification

    actor = member_actor(owner)
    notifications.create_webhook(actor=actor, name="ops", url="https://hooks.example.com/airlock",
                                 events=["budget.alert"])
    services.set_model_price(actor=actor, model="my-llama", input_per_mtok=Decimal(1000), output_per_mtok=Decimal(0),
                             effective_from=NOW - timedelta(days=1))
    services.set_budget(actor=actor, scope="org", amount_usd="1", thresholds=[50])
    for _ in range(3):  # $0.60 each: the first crosses 50 %, the second 100 %, the third nothing new
        services.record_usage(org_id=org.id, provider="openai_compatible", model="my-llama", input_tokens=600,
                              output_tokens=0)
    sent = Notification.objects.filter(org=org, event="budget.alert").order_by("created_at")
    assert [n.payload["threshold"] for n in sent] == [50, 100]
    assert sent[1].payload["spent_usd"] == "1.20000000" and sent[1].payload["amount_usd"] == "1.0000"
