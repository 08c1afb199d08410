"""The live trace and inbox over Channels: who may connect, ordered replay after last_seq from the
event table, and a 500-event burst arriving complete and in order on each channel layer."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.layers import channel_layers
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from apps.runs import decisions, services, worker
from apps.runs.ledger import append_event
from config.asgi import application
from tests.approvals.test_decisions import A1001
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)

EMBEDDED = {"default": {"BACKEND": "apps.core.channel_layer.DatabaseChannelLayer", "CONFIG": {"poll_interval": 0.1}}}
LAYERS = {"embedded": EMBEDDED}
if settings.REDIS_URL:  # CI and the production stack: the Redis layer too
    LAYERS["redis"] = settings.CHANNEL_LAYERS


@pytest.fixture(params=sorted(LAYERS))
def layer(request):
    with override_settings(CHANNEL_LAYERS=LAYERS[request.param]):
        channel_layers.backends.clear()
        yield request.param
        channel_layers.backends.clear()
    channel_layers.backends.clear()


def communicator(path: str, user=None) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://testserver"),
                                                             (b"host", b"testserver")])
    if user is not None:
        comm.scope["user"] = user
    return comm


async def frames_until(comm, done, timeout=60.0) -> list[str]:
    out: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done(out):
        out.append(await comm.receive_from(timeout=max(0.1, deadline - loop.time())))
    return out


def events(frames: list[str]) -> list[dict]:
    return [json.loads(f) for f in frames if f.startswith("{")]


@pytest.fixture
def waiting_run(desk):
    crew = desk.refund_desk()
    return worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                        enqueue=False).id)


def test_anonymous_and_other_org_sockets_are_refused(waiting_run, outsider, org):
    async def closed(path, user=None):
        comm = communicator(path, user)
        await comm.connect()
        message = await comm.receive_output(timeout=5)
        await comm.disconnect()
        return message

    for path in (f"/ws/run/{waiting_run.id}/", f"/ws/inbox/{org.id}/", f"/ws/runs/{org.id}/"):
        assert run_async(closed(path)) == {"type": "websocket.close", "code": 4403}
        assert run_async(closed(path, outsider.user)) == {"type": "websocket.close", "code": 4403}


def test_a_reconnect_replays_every_event_after_last_seq_in_order_then_the_page(waiting_run, builder):
    last = waiting_run.last_seq
    assert last > 6

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/?last_seq=3", builder.user)
        assert (await comm.connect())[0]
        frames = await frames_until(comm, lambda f: any(x.startswith("<") for x in f))
        await comm.disconnect()
        return frames

    frames = run_async(scenario())
    assert [e["seq"] for e in events(frames)] == list(range(4, last + 1))
    assert events(frames)[-1]["type"] == "run.waiting"
    assert 'id="run-tree" hx-swap-oob="true"' in frames[-1] and "orders.refund_order" in frames[-1]


def test_an_approver_sees_the_inline_decision_form_and_a_viewer_does_not(waiting_run, approver, viewer):
    async def page(user):
        comm = communicator(f"/ws/run/{waiting_run.id}/?last_seq=0", user)
        await comm.connect()
        frames = await frames_until(comm, lambda f: any(x.startswith("<") for x in f))
        await comm.disconnect()
        return frames[-1]

    assert 'data-testid="decide-form"' in run_async(page(approver.user))
    assert 'data-testid="decide-form"' not in run_async(page(viewer.user))


def test_a_500_event_burst_arrives_complete_and_in_order(layer, waiting_run, builder):
    start = waiting_run.last_seq

    def burst():
        for n in range(500):
            with transaction.atomic():
                append_event(waiting_run.id, "test.burst", n=n)

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/?last_seq={start}", builder.user)
        assert (await comm.connect())[0]
        await asyncio.sleep(0.3)  # subscribed, watcher running
        await asyncio.to_thread(burst)
        frames = await frames_until(comm, lambda f: any(e["seq"] == start + 500 for e in events(f)), timeout=120)
        await comm.disconnect()
        return frames

    received = events(run_async(scenario()))
    assert [e["seq"] for e in received] == list(range(start + 1, start + 501))
    assert [e["data"]["n"] for e in received] == list(range(500))


def test_a_decision_by_someone_else_replaces_the_item_in_every_open_inbox(layer, waiting_run, org, approver, admin):
    from apps.accounts.actors import member_actor
    from apps.approvals.models import ApprovalRequest

    request = ApprovalRequest.objects.get(run_id=waiting_run.id)

    async def scenario():
        comm = communicator(f"/ws/inbox/{org.id}/", approver.user)
        assert (await comm.connect())[0]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lambda: decisions.decide_approval(actor=member_actor(admin), approval_id=request.id,
                                                                 decision="reject", comment="not this one"))
        frames = await frames_until(comm, lambda f: any('"replace"' in x for x in f), timeout=30)
        await comm.disconnect()
        return frames

    frame = json.loads([f for f in run_async(scenario()) if '"replace"' in f][-1])
    assert frame["replace"] == f"approval-{request.id}"
    assert "Rejected" in frame["html"] and admin.user.email in frame["html"] and "decide-form" not in frame["html"]


def test_the_run_list_hears_status_changes(layer, desk, org, builder):
    crew = desk.refund_desk()

    async def scenario():
        comm = communicator(f"/ws/runs/{org.id}/", builder.user)
        assert (await comm.connect())[0]
        await asyncio.sleep(0.3)
        run = await asyncio.to_thread(lambda: services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                                 enqueue=False))
        frames = await frames_until(comm, lambda f: any(str(run.id) in x for x in f), timeout=30)
        await comm.disconnect()
        return run, frames

    run, frames = run_async(scenario())
    frame = json.loads(next(f for f in frames if str(run.id) in f))
    assert frame["replace"] == f"run-status-{run.id}" and 'data-status="queued"' in frame["html"]
