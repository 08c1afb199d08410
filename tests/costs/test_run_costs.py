"""A run's costs: the run page links to the costs page filtered to that run, which lists the run's own model
calls (and no other run's) with their total; its CSV link carries the same filter; another organisation's run
is not found."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.costs.models import UsageRecord
from apps.runs import services, worker
from tests.conftest import signed_in
from tests.factories import make_org, owner_of

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}


def test_the_run_page_links_to_the_costs_page_filtered_to_that_run(client, desk, owner):
    crew = desk.refund_desk(refund_policy="auto")
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    other = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                         enqueue=False).id)
    mine = list(UsageRecord.objects.filter(run_id=run.id))
    assert mine and UsageRecord.objects.filter(run_id=other.id).exists()
    assert len(mine) > 2
    UsageRecord.objects.filter(id=mine[0].id).update(cost_usd=Decimal("0.0123"))
    UsageRecord.objects.filter(id=mine[1].id).update(cost_usd=None)  # a call whose price is not known
    known = sum((r.cost_usd for r in UsageRecord.objects.filter(run_id=run.id) if r.cost_usd is not None), Decimal(0))
    signed_in(client, owner)
    detail = client.get(f"/runs/{run.id}/").content.decode()
    assert f'href="/costs/?run={run.id}" data-testid="run-costs-link"' in detail

    page = client.get(f"/costs/?run={run.id}").content.decode()
    assert 'data-testid="run-costs"' in page
    assert page.count('data-testid="run-call"') == len(mine)
    assert f'data-testid="run-total">${known:,.4f} + 1 calls at unknown price<' in page
    assert page.count(">unknown</td>") == 1
    assert f"/costs/export.csv?run={run.id}" in page and f"/runs/{run.id}/" in page
    csv = b"".join(client.get(f"/costs/export.csv?run={run.id}").streaming_content).decode()
    assert len(csv.strip().splitlines()) - 1 == len(mine) and str(other.id) not in csv

    plain = client.get("/costs/").content.decode()
    assert 'data-testid="run-costs"' not in plain


def test_another_organisations_run_is_not_found_on_the_costs_page(client, desk, owner):
    crew = desk.refund_desk(refund_policy="auto")
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    stranger = make_org("Elsewhere")
    signed_in(client, owner_of(stranger))
    assert client.get(f"/costs/?run={run.id}").status_code == 404
    assert client.get("/costs/?run=not-a-uuid").status_code == 404
    assert client.get(f"/costs/export.csv?run={run.id}").status_code == 404
