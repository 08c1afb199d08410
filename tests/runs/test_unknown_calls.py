"""Calls whose outcome is unknown (a worker died after sending, before storing the result): a person says
what happened through the API, the run page or the inbox; Airlock never sends the call again."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.testing.websocket import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.audit.models import AuditEvent
from apps.runs import decisions, services
from apps.runs import worker as run_worker
from apps.runs.messages import turn_messages
from apps.runs.models import Run, ToolCall
from config.asgi import application
from tests.conftest import signed_in
from tests.factories import token_for
from tests.processes import run_async
from tests.runs.conftest import LOOK_UP

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 500}
NOTE = "checked the desk: no refund was made"


def unknown_call(desk, approver) -> tuple[Run, ToolCall]:
    """What a worker killed right after committing `dispatched` leaves behind, once the engine saw it."""
    run = services.start_run(actor=desk.actor, crew_id=desk.refund_desk().id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)
    request = ToolCall.objects.get(run=run, state="held").approval
    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    row = ToolCall.objects.get(id=request.tool_call_id)
    ToolCall.objects.filter(id=row.id).update(state="dispatched", approved_arguments=row.arguments,
                                              dispatched_at=timezone.now())
    run = run_worker.drive_run(run_id=run.id)
    row.refresh_from_db()
    assert row.state == "unknown" and run.status == "waiting"
    assert desk.refunds() == {}
    return run, row


def api(membership_or_org, role: str = "approver") -> Client:
    return Client(headers={"Authorization": f"Bearer {token_for(membership_or_org, role)}"})


def test_the_api_lists_and_resolves_an_unknown_call_and_the_run_finishes_with_the_model_told(desk, approver, org):
    run, row = unknown_call(desk, approver)
    client = api(org)
    listed = client.get("/api/v1/tool-calls?state=unknown").json()
    assert listed["count"] == 1 and listed["items"][0]["id"] == str(row.id)
    assert listed["items"][0]["run_id"] == str(run.id) and listed["items"][0]["tool"] == "orders.refund_order"
    assert client.get("/api/v1/tool-calls?state=held").json()["count"] == 0
    assert client.get("/api/v1/tool-calls?state=nonsense").status_code == 422

    bad = client.post(f"/api/v1/tool-calls/{row.id}/resolve", {"outcome": "maybe"}, content_type="application/json")
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "outcome"
    resolved = client.post(f"/api/v1/tool-calls/{row.id}/resolve", {"outcome": "failed", "note": NOTE},
                           content_type="application/json")
    assert resolved.status_code == 200, resolved.content
    body = resolved.json()
    assert body["id"] == str(row.id) and body["run_id"] == str(run.id) and body["tool"] == "orders.refund_order"
    assert body["state"] == "failed" and body["result"] == NOTE and body["result_is_error"] is True
    assert body["resolved_by"].startswith("token:")
    assert AuditEvent.objects.filter(org=org, action="tool_call.resolved").count() == 1

    again = client.post(f"/api/v1/tool-calls/{row.id}/resolve", {"outcome": "succeeded"},
                        content_type="application/json")
    assert again.status_code == 409 and "failed" in again.json()["detail"]
    assert client.get("/api/v1/tool-calls?state=unknown").json()["count"] == 0

    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded"
    assert desk.refunds() == {}  # never sent again
    turn = run.steps.get(kind="agent", task="refund")
    assert NOTE in json.dumps(turn_messages(turn))  # the model read the person's note as the call's result


@pytest.mark.parametrize("role", ["viewer", "builder"])
def test_roles_that_cannot_decide_get_403_and_the_call_stays_unknown(desk, approver, org, role):
    _run, row = unknown_call(desk, approver)
    client = api(org, role)
    assert client.get("/api/v1/tool-calls?state=unknown").json()["count"] == 1  # they may look
    denied = client.post(f"/api/v1/tool-calls/{row.id}/resolve", {"outcome": "failed"},
                         content_type="application/json")
    assert denied.status_code == 403
    row.refresh_from_db()
    assert row.state == "unknown"


def test_another_organisation_neither_sees_nor_resolves_it(desk, approver, outsider):
    _run, row = unknown_call(desk, approver)
    client = api(outsider.org, "admin")
    assert client.get("/api/v1/tool-calls?state=unknown").json() == {"items": [], "count": 0}
    assert client.get(f"/api/v1/tool-calls/{row.id}").status_code == 404
    missing = client.post(f"/api/v1/tool-calls/{row.id}/resolve", {"outcome": "succeeded"},
                          content_type="application/json")
    assert missing.status_code == 404
    row.refresh_from_db()
    assert row.state == "unknown"
    page = signed_in(Client(), outsider).post(f"/tool-calls/{row.id}/resolve/", {"outcome": "succeeded"})
    assert page.status_code == 404


def test_the_run_page_explains_and_offers_the_answers_to_an_approver_only(client, desk, approver, viewer):
    run, row = unknown_call(desk, approver)
    signed_in(client, viewer)
    seen = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="tool-call" data-state="unknown"' in seen
    assert "Airlock cannot tell whether it happened" in seen
    assert 'data-testid="resolve-form"' not in seen and "It happened" not in seen
    assert client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "failed"}).status_code == 403

    signed_in(client, approver)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert "Airlock cannot tell whether it happened" in page
    assert f'action="/tool-calls/{row.id}/resolve/"' in page
    assert "It happened" in page and "It did not happen" in page

    posted = client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "succeeded", "note": "the desk shows it"})
    assert posted.status_code == 302 and posted["Location"] == f"/runs/{run.id}/"
    row.refresh_from_db()
    assert row.state == "succeeded" and row.resolved_by == approver.user.email
    assert row.result["text"] == "the desk shows it"
    after = client.get(posted["Location"]).content.decode()
    assert "Recorded: the call happened." in after and 'data-testid="resolve-form"' not in after
    assert f"outcome told by {approver.user.email}" in after

    twice = client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "failed"}, follow=True)
    assert "This call is succeeded, not unknown." in twice.content.decode()
    row.refresh_from_db()
    assert row.state == "succeeded"
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and desk.refunds() == {}


def test_the_inbox_lists_unknown_calls_and_its_form_resolves_them(client, desk, approver):
    run, row = unknown_call(desk, approver)
    signed_in(client, approver)
    inbox = client.get("/inbox/").content.decode()
    assert "Calls with an unknown outcome" in inbox and 'data-testid="unknown-call"' in inbox
    assert "orders.refund_order" in inbox and f'href="/runs/{run.id}/"' in inbox
    assert f'action="/tool-calls/{row.id}/resolve/"' in inbox and 'name="next" value="/inbox/"' in inbox
    assert "Calls with an unknown outcome" not in client.get("/inbox/?kind=definition_change").content.decode()

    bad = client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "maybe", "next": "/inbox/"}, follow=True)
    assert "Say whether the call happened." in bad.content.decode()
    posted = client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "failed", "note": NOTE, "next": "/inbox/"},
                         HTTP_HX_REQUEST="true")
    assert posted.status_code == 204 and posted["HX-Redirect"] == "/inbox/"
    row.refresh_from_db()
    assert row.state == "failed" and row.result["text"] == NOTE
    after = client.get("/inbox/").content.decode()
    assert "Recorded: the call did not happen." in after and "Calls with an unknown outcome" not in after
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and desk.refunds() == {}


def test_the_page_form_needs_the_csrf_token(desk, approver):
    run, row = unknown_call(desk, approver)
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver.user)
    assert client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "failed"}).status_code == 403
    page = client.get(f"/runs/{run.id}/").content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    posted = client.post(f"/tool-calls/{row.id}/resolve/", {"outcome": "failed", "csrfmiddlewaretoken": token})
    assert posted.status_code == 302
    row.refresh_from_db()
    assert row.state == "failed"


@pytest.mark.django_db(transaction=True)
def test_the_inbox_badge_counts_unknown_calls_and_hears_when_one_is_resolved(client, desk, approver):
    _run, row = unknown_call(desk, approver)  # held (1), approved (0), then unknown (1)
    signed_in(client, approver)
    assert 'id="inbox-badge" class="badge bg-red text-red-fg"' in client.get("/inbox/").content.decode()
    assert 'data-count="1">1</span>' in client.get("/inbox/").content.decode()

    async def live_badge():
        comm = WebsocketCommunicator(application, f"/ws/org/{approver.org_id}/",
                                     headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")])
        comm.scope["user"] = approver.user
        assert (await comm.connect())[0]
        first = await comm.receive_from(timeout=10)
        await asyncio.to_thread(lambda: decisions.resolve_unknown_call(actor=member_actor(approver),
                                                                      tool_call_id=row.id, outcome="failed"))
        frame = await comm.receive_from(timeout=30)
        while 'id="inbox-badge"' not in frame:
            frame = await comm.receive_from(timeout=30)
        await comm.disconnect()
        return first, frame

    first, resolved = run_async(live_badge())
    assert 'data-count="1">1</span>' in first  # on connect
    assert 'data-count="0">0</span>' in resolved  # told when it was resolved
    assert 'data-count="0">0</span>' in client.get("/inbox/").content.decode()


def test_a_read_in_flight_when_its_worker_stopped_is_made_again_not_put_to_a_person(desk, approver):
    """A read changes nothing, so a lookup left `dispatched` by a dead worker is sent again by the next one."""
    reader = desk.agent("Careful reader", [{"call": [LOOK_UP]}, {"say": "Looked.\nSTATUS: done\nREASON: ok"}],
                        [{"tool": "orders.get_order_status", "policy": "approve"}])
    crew = desk.sequential("Careful lookups", [("look", reader, "Look up order {order_id}.", [])])
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)
    request = ToolCall.objects.get(run=run, state="held").approval
    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    # What a worker killed while its lookup was out leaves behind: the row sent once, its result never stored.
    ToolCall.objects.filter(id=request.tool_call_id).update(state="dispatched", attempts=1,
                                                            dispatched_at=timezone.now())
    run = run_worker.drive_run(run_id=run.id)
    row = ToolCall.objects.get(id=request.tool_call_id)
    assert run.status == "succeeded", run.error
    assert row.state == "succeeded" and row.attempts == 2 and "A-1001" in row.result["text"]
    assert not ToolCall.objects.filter(run=run, state="unknown").exists()
    assert run.events.filter(type="tool.retried", data__tool_call_id=str(row.id)).exists()
    assert not run.events.filter(type__in=["tool.unknown", "run.waiting"], seq__gt=request_seq(run)).exists()


def request_seq(run: Run) -> int:
    """The seq of the run's approval decision: what follows it is the resumed run."""
    return run.events.get(type="approval.decided").seq
