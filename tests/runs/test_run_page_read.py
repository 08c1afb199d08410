"""The run page's two reads (apps/runs/page_read.py): the prebuilt one in one round trip shows what the ORM's shows,
for a run with a held call, a decided one, context resources and a server's questions; and neither shows a run
of another organisation, nor an id that is none."""

from __future__ import annotations

import uuid

import pytest

from apps.accounts.actors import member_actor
from apps.core.errors import NotFound
from apps.runs import decisions as run_decisions
from apps.runs import ledger, page_read, services, worker
from apps.runs.models import ToolCall
from tests.factories import make_org

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 500}


def fields(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def shown(page: page_read.RunPage) -> dict:
    """Everything the page shows of its read, as plain values (an approval request as its fields, or None)."""
    return {"run": fields(page.run),
            "steps": [fields(s) for s in page.rows.steps],
            "calls": [(fields(c), c.approval and fields(c.approval)) for c in page.rows.calls],
            "events": [fields(e) for e in page.rows.events],
            "latest": [fields(e) for e in page.latest_events]}


def both(**kwargs) -> tuple[dict, dict]:
    return shown(page_read.run_page(**kwargs)), shown(page_read.run_page_plain(**kwargs))


@pytest.fixture
def busy_run(desk, approver):
    """A refund run: one call approved and run, then a second held; with a context resource read and a server's
    question recorded in its events."""
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    held = ToolCall.objects.get(run=run, state="held")
    turn = held.step.parent_id
    ledger.append_event(run.id, "context.read", step_id=str(turn), uri="orders://policy", sha256="0" * 64)
    ledger.append_event(run.id, "elicitation.requested", tool_call_id=str(held.id), message="Which account?")
    ledger.append_event(run.id, "test.unrelated", n=1)  # in the newest events only
    return run, held, approver


def test_the_prebuilt_read_shows_what_the_orm_shows(busy_run):
    run, held, approver = busy_run
    fast, plain = both(org_id=run.org_id, run_id=run.id, events_shown=100)
    assert fast == plain
    assert [c[1]["status"] for c in fast["calls"] if c[1]] == ["pending"]  # the held call's request came along
    assert {e["type"] for e in fast["events"]} == {"context.read", "elicitation.requested"}
    assert fast["latest"][0]["type"] == "test.unrelated" and len(fast["latest"]) == run.last_seq + 3

    run_decisions.decide_approval(actor=member_actor(approver), approval_id=held.approval_id, decision="approve")
    worker.drive_run(run_id=run.id)
    fast, plain = both(org_id=str(run.org_id), run_id=str(run.id), events_shown=5, events_upto=7)
    assert fast == plain
    assert [e["seq"] for e in fast["latest"]] == [7, 6, 5, 4, 3]
    assert [c[1]["status"] for c in fast["calls"] if c[1]] == ["approved"]


def test_neither_read_shows_another_organisation_s_run_or_an_id_that_is_none(busy_run):
    run, _, _ = busy_run
    other = make_org()
    for read in (page_read.run_page, page_read.run_page_plain):
        for org_id, run_id in ((other.id, run.id), (run.org_id, uuid.uuid4()), (run.org_id, "not-a-run")):
            with pytest.raises(NotFound):
                read(org_id=org_id, run_id=run_id, events_shown=100)
