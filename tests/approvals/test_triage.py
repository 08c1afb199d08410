"""Inbox triage: the order, filters, age and pages of the inbox, and deciding several items at once, each as its
own decision with M-of-N and separation of duties applied per item."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.approvals.models import ApprovalRequest, ApprovalVote
from apps.runs import services, worker
from apps.web.views import triage_pages
from tests.conftest import signed_in

pytestmark = pytest.mark.django_db


def _held(desk, crew, order_id, *, minutes_ago=0):
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs={"order_id": order_id, "amount_cents": 500},
                             enqueue=False)
    worker.drive_run(run_id=run.id)
    request = ApprovalRequest.objects.get(run_id=run.id, status="pending")
    if minutes_ago:
        when = timezone.now() - timedelta(minutes=minutes_ago)
        ApprovalRequest.objects.filter(id=request.id).update(created_at=when, expires_at=when + timedelta(hours=24))
    return ApprovalRequest.objects.get(id=request.id)


def _order(page: str, requests) -> list:
    return sorted(requests, key=lambda r: page.index(f'id="approval-{r.id}"'))


def test_the_inbox_is_oldest_first_shows_each_items_age_and_sorts_and_filters(client, desk, approver):
    crew = desk.refund_desk()
    old = _held(desk, crew, "A-1001", minutes_ago=14)
    older = _held(desk, crew, "A-1002", minutes_ago=300)
    new = _held(desk, crew, "A-1003")
    near = _held(desk, crew, "A-1004", minutes_ago=23 * 60 + 30)  # under an hour left of its 24
    signed_in(client, approver)

    page = client.get("/inbox/").content.decode()
    assert _order(page, [old, older, new, near]) == [near, older, old, new]
    assert "waiting 14 min" in page and "waiting 5 h" in page and "waiting under a minute" in page
    assert "text-red fw-bold\">waiting 23 h 30 min" in page and "expires within the hour" in page
    assert 'data-testid="inbox-keys"' in page and "<kbd>j</kbd>" in page

    newest = client.get("/inbox/?sort=newest").content.decode()
    assert _order(newest, [old, older, new, near]) == [new, old, older, near]
    aged = client.get("/inbox/?age=1h").content.decode()
    assert f'id="approval-{new.id}"' not in aged and f'id="approval-{old.id}"' not in aged
    assert f'id="approval-{older.id}"' in aged
    assert 'value="orders.refund_order" selected' in client.get("/inbox/?tool=orders.refund_order").content.decode()
    assert 'id="approval-' not in client.get("/inbox/?tool=orders.delete_customer").content.decode()
    risky = client.get("/inbox/?sort=risk&risk=write").content.decode()
    assert _order(risky, [old, older, new, near]) == [near, older, old, new]


def test_the_inbox_is_paged(client, desk, approver, monkeypatch):
    crew = desk.refund_desk()
    requests = [_held(desk, crew, f"A-100{n}", minutes_ago=10 - n) for n in range(1, 4)]
    monkeypatch.setattr(triage_pages, "PAGE", 2)
    signed_in(client, approver)
    first = client.get("/inbox/").content.decode()
    assert [f'id="approval-{r.id}"' in first for r in requests] == [True, True, False]
    assert 'data-testid="next-page"' in first and "Items 1 to 2" in first
    second = client.get("/inbox/?page=2").content.decode()
    assert [f'id="approval-{r.id}"' in second for r in requests] == [False, False, True]


def test_several_items_are_decided_together_each_as_its_own_decision(client, desk, owner):
    plain = desk.refund_desk(name="Plain desk")
    two = desk.refund_desk(name="Two-person desk", approvals_required=2)
    separated = desk.refund_desk(name="Separated desk", separation_of_duties=True)
    a = _held(desk, plain, "A-1001")
    b = _held(desk, two, "A-1002")
    own = _held(desk, separated, "A-1003")  # the owner started this run: separation of duties
    signed_in(client, owner)
    page = client.get("/inbox/").content.decode()
    assert page.count('data-testid="select-item"') == 3

    answer = client.post("/inbox/batch/", {"decision": "approve", "comment": "batch", "next": "/inbox/",
                                           "ids": [f"{r.id}:{r.args_hash}" for r in (a, b, own)]}, follow=True)
    text = answer.content.decode()
    a.refresh_from_db(), b.refresh_from_db(), own.refresh_from_db()
    assert a.status == "approved" and a.decided_by_label == owner.user.email
    assert b.status == "pending" and ApprovalVote.objects.filter(request=b, decision="approve").count() == 1  # 1 of 2
    assert own.status == "pending" and not ApprovalVote.objects.filter(request=own).exists()
    assert "Approved 2 items" in text and "Not decided: orders.refund_order by Separated desk refunds" in text
    assert worker.drive_run(run_id=a.run_id).status == "succeeded"  # approved items resume like single ones

    stale = client.post("/inbox/batch/", {"decision": "reject", "ids": [f"{b.id}:{'0' * 64}"]}, follow=True)
    b.refresh_from_db()
    assert b.status == "pending" and "Not decided" in stale.content.decode()  # arguments changed since seen
    assert "Select at least one item" in client.post("/inbox/batch/", {"decision": "approve"},
                                                     follow=True).content.decode()


def test_a_viewer_cannot_decide_in_a_batch(client, desk, viewer):
    request = _held(desk, desk.refund_desk(), "A-1001")
    signed_in(client, viewer)
    assert 'data-testid="select-item"' not in client.get("/inbox/").content.decode()
    assert client.post("/inbox/batch/", {"decision": "approve", "ids": [str(request.id)]}).status_code == 403
    request.refresh_from_db()
    assert request.status == "pending"
