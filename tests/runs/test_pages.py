"""Run pages, the inbox and the run websocket, as members see them."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from apps.runs import services, worker
from apps.runs.models import Run
from config.asgi import application
from tests.conftest import signed_in
from tests.processes import run_async

A1001 = {"order_id": "A-1001", "amount_cents": 500}


@pytest.mark.django_db
def test_a_builder_starts_a_run_from_the_crews_inputs_and_sees_field_errors(client, desk, builder):
    crew = desk.refund_desk()
    signed_in(client, builder)
    page = client.get(f"/crews/{crew.id}/run/")
    assert b'name="input_order_id"' in page.content and b'name="input_amount_cents"' in page.content
    bad = client.post(f"/crews/{crew.id}/run/", {"input_order_id": "A-1001", "input_amount_cents": "lots"})
    assert bad.status_code == 422 and b"A whole number." in bad.content
    started = client.post(f"/crews/{crew.id}/run/", {"input_order_id": "A-1001", "input_amount_cents": "500"})
    run = Run.objects.get(crew=crew)
    assert started.status_code == 302 and started["Location"] == f"/runs/{run.id}/"
    assert run.inputs == A1001 and run.status == "queued"


@pytest.mark.django_db
def test_the_run_page_shows_the_step_tree_and_an_approver_decides_in_the_inbox(client, desk, approver, outsider):
    crew = desk.refund_desk()
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    signed_in(client, approver)
    detail = client.get(f"/runs/{run.id}/").content.decode()
    assert "orders.get_order_status" in detail and "orders.refund_order" in detail
    assert 'data-state="held"' in detail and "grant for orders.refund_order is approve" in detail
    assert "scripted / scripted" in detail
    assert run.crew_name in client.get("/runs/").content.decode()
    inbox = client.get("/inbox/").content.decode()
    approval = run.ledger.get(state="held").approval
    assert f"/inbox/{approval.id}/decide/" in inbox and "500" in inbox
    decided = client.post(f"/inbox/{approval.id}/decide/", {"decision": "reject", "comment": "not today"})
    assert decided.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.decided_by_label == approver.user.email
    assert client.post(f"/inbox/{approval.id}/decide/", {"decision": "approve"}).status_code == 409
    signed_in(client, outsider)
    assert client.get(f"/runs/{run.id}/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_run_socket_sends_the_page_and_refuses_outsiders(desk, builder, outsider):
    crew = desk.refund_desk()
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)

    async def connect(user):
        communicator = WebsocketCommunicator(application, f"/ws/run/{run.id}/",
                                             headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")])
        communicator.scope["user"] = user
        await communicator.connect()
        message = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return message

    page = run_async(connect(builder.user))
    assert page["type"] == "websocket.send"
    assert 'id="run-tree"' in page["text"] and "orders.refund_order" in page["text"]
    refused = run_async(connect(outsider.user))
    assert refused["type"] == "websocket.close" and refused["code"] == 4403
