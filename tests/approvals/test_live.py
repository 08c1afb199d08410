"""The live trace, inbox and run list over Channels: who may connect, what each page gets on connect (its
reconnect catch-up) and on a change, and a 500-event burst ending on the page, on each channel layer."""

from __future__ import annotations

import asyncio
import re

import pytest
from channels.layers import channel_layers
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from apps.core.realtime import org_group, run_group
from apps.core.redis_layer import ReconnectingPubSubChannelLayer
from apps.runs import decisions, services, worker
from apps.runs.ledger import append_event
from apps.web.consumers import CATCH_UP_S
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


async def opened(path: str, user) -> tuple[WebsocketCommunicator, str]:
    """A page's socket, connected, and the first frame it sent (the page as it stands)."""
    comm = communicator(path, user)
    assert (await comm.connect())[0]
    return comm, await comm.receive_from(timeout=10)


async def frames_until(comm, done, timeout=60.0) -> list[str]:
    out: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done(out):
        out.append(await comm.receive_from(timeout=max(0.1, deadline - loop.time())))
    return out


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


def test_on_connect_the_run_socket_sends_every_panel_as_it_stands(waiting_run, builder):
    """A reconnect after a drop or a restarted web process catches up this way: no cursor in the browser."""
    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/", builder.user)
        assert (await comm.connect())[0]
        frame = await comm.receive_from(timeout=10)
        await comm.disconnect()
        return frame

    frame = run_async(scenario())
    for panel in ("run-actions", "run-header", "run-tree", "run-events", "run-history"):
        assert f'id="{panel}"' in frame
    assert "orders.refund_order" in frame and f'data-seq="{waiting_run.last_seq}"' in frame
    assert "No steps yet" not in frame and "No model calls yet" not in frame


def test_a_page_that_already_shows_the_newest_event_gets_nothing_until_the_run_moves(waiting_run, builder):
    """A page just loaded (`seq` = the newest event it was rendered with) keeps its forms: the socket only
    sends when the run moves, first the new event, then the panels."""
    last = waiting_run.last_seq

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/?seq={last}", builder.user)
        assert (await comm.connect())[0]
        assert await comm.receive_nothing(timeout=0.5)
        await asyncio.to_thread(lambda: append_event(waiting_run.id, "test.moved"))
        frames = await frames_until(comm, lambda f: any(x.startswith("\n") or 'id="run-tree"' in x for x in f))
        await comm.disconnect()
        return frames

    frames = run_async(scenario())
    assert frames[0].startswith(NEW_EVENTS) and f"#{last + 1} test.moved" in frames[0]
    assert 'id="run-tree"' in frames[-1] and f'data-seq="{last + 1}"' in frames[-1]


@pytest.mark.parametrize("shown", ["an older event", "an event the run never had"])
def test_a_page_that_does_not_show_the_newest_event_gets_every_panel_at_once(waiting_run, builder, shown):
    """Only a page that shows the run's newest event is spared the panels: one rendered before the run moved (or
    whose URL names an event the run never had) gets the run as it stands at once, then its new events live."""
    last = waiting_run.last_seq
    seq = last - 1 if shown == "an older event" else last + 50

    async def scenario():
        comm, first = await opened(f"/ws/run/{waiting_run.id}/?seq={seq}", builder.user)
        await asyncio.to_thread(lambda: append_event(waiting_run.id, "test.moved"))
        frames = await frames_until(comm, lambda f: any(x.startswith(NEW_EVENTS) for x in f))
        await comm.disconnect()
        return first, frames

    first, frames = run_async(scenario())
    assert 'id="run-tree"' in first and f'data-seq="{last}"' in first
    assert added_events(frames) == [last + 1]


def test_an_approver_sees_the_inline_decision_form_and_a_viewer_does_not(waiting_run, approver, viewer):
    async def page(user):
        comm = communicator(f"/ws/run/{waiting_run.id}/", user)
        await comm.connect()
        frame = await comm.receive_from(timeout=10)
        await comm.disconnect()
        return frame

    assert 'data-testid="decide-form"' in run_async(page(approver.user))
    assert 'data-testid="decide-form"' not in run_async(page(viewer.user))


NEW_EVENTS = '<div hx-swap-oob="afterbegin:#run-event-list">'
SEQ = re.compile(r'data-seq="(\d+)"')


def added_events(frames: list[str]) -> list[int]:
    """The seqs the socket added on top of the page's event list, oldest first."""
    return [int(seq) for f in frames if f.startswith(NEW_EVENTS) for seq in SEQ.findall(f)[::-1]]


def test_a_500_event_burst_arrives_complete_and_in_order(layer, waiting_run, builder):
    start = waiting_run.last_seq

    def burst():
        for n in range(500):
            with transaction.atomic():
                append_event(waiting_run.id, "test.burst", n=n)

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/", builder.user)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=10)  # the page as it stood
        await asyncio.sleep(0.3)  # subscribed, watcher running
        await asyncio.to_thread(burst)
        frames = await frames_until(comm, lambda f: any(not x.startswith(NEW_EVENTS)
                                                        and f'data-seq="{start + 500}"' in x for x in f), timeout=120)
        await comm.disconnect()
        return frames

    frames = run_async(scenario())
    assert added_events(frames) == list(range(start + 1, start + 501))
    assert f"#{start + 500} test.burst" in frames[-1] and f"#{start + 401} test.burst" in frames[-1]
    assert sum(not f.startswith(NEW_EVENTS) for f in frames) < 100  # the panels once per burst, not per event


def test_new_events_reach_the_page_while_its_panels_are_still_rendering(layer, waiting_run, builder, monkeypatch):
    """Rendering the panels is the slow part of a page's update (tens of ms on a long run): an event, carried by
    its nudge or read from the table after coalesced nudges, is sent while a render is still under way."""
    import threading

    from apps.web import consumers

    hold, render_may_finish, rendering = threading.Event(), threading.Event(), threading.Event()
    real_render = consumers.run_panels

    def slow_render(**kwargs):
        if hold.is_set():  # a render that takes as long as the test lets it
            rendering.set()
            render_may_finish.wait(20)
        return real_render(**kwargs)

    monkeypatch.setattr(consumers, "run_panels", slow_render)
    start = waiting_run.last_seq

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/", builder.user)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=10)  # the page as it stood
        await asyncio.sleep(0.3)  # subscribed, watcher running
        hold.set()
        await asyncio.to_thread(append_event, waiting_run.id, "test.first")
        frames = await frames_until(comm, lambda f: added_events(f) == [start + 1], timeout=10)
        assert await asyncio.to_thread(rendering.wait, 10)  # the panels' render (after the first event) is stuck
        await asyncio.to_thread(append_event, waiting_run.id, "test.during")  # the next one: carried by its nudge
        for n in range(3):  # a burst whose nudges coalesce: the socket reads the table
            await asyncio.to_thread(append_event, waiting_run.id, "test.burst", n=n)
        try:
            frames += await frames_until(comm, lambda f: start + 5 in added_events(f), timeout=5)
            still_rendering = not render_may_finish.is_set()
        finally:
            render_may_finish.set()
        frames += await frames_until(comm, lambda f: any('id="run-tree"' in x for x in f), timeout=10)
        await comm.disconnect()
        return frames, still_rendering

    frames, still_rendering = run_async(scenario())
    assert still_rendering
    assert added_events(frames) == list(range(start + 1, start + 6))


async def the_layer_forgets(group: str) -> None:
    """What a web process's sockets live through when the layer loses their messages: Redis's pub/sub keeps nothing
    for a process that is not listening at that moment (a reconnect, a stalled process that Redis cut off), and
    the old sorted-set layer dropped, without an error, every message for a process whose list was full
    (bench/load.py: pages of a busy process stopped updating mid-run). Here this process stops listening to
    `group`: nothing sent to it reaches the page any more."""
    layer = channel_layers["default"]
    if isinstance(layer, ReconnectingPubSubChannelLayer):
        here = layer._get_layer()  # this event loop's, which the page's consumer receives on
        channel = here._get_group_channel_name(group)
        here.groups.pop(channel, None)
        await here._get_shard(channel).unsubscribe(channel)
    else:
        layer.groups.pop(group, None)


def test_a_page_the_layer_stops_telling_still_gets_every_event(layer, waiting_run, builder):
    """The page still gets each new event, once and in order, by reading the table when it has heard nothing."""
    start = waiting_run.last_seq

    async def scenario():
        comm = communicator(f"/ws/run/{waiting_run.id}/", builder.user)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=10)  # the page as it stood
        await the_layer_forgets(run_group(waiting_run.id))
        for n in range(3):
            await asyncio.to_thread(append_event, waiting_run.id, "test.unheard", n=n)
        frames = await frames_until(comm, lambda f: start + 3 in added_events(f), timeout=15)
        await comm.disconnect()
        return frames

    assert added_events(run_async(scenario())) == list(range(start + 1, start + 4))


def test_the_run_list_shows_a_status_change_the_layer_did_not_tell_it(layer, desk, org, builder):
    crew = desk.refund_desk()
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    badge = f'id="run-status-{run.id}"'

    async def scenario():
        comm, first = await opened(f"/ws/runs/{org.id}/?runs={run.id}", builder.user)
        await the_layer_forgets(org_group(org.id))
        await asyncio.to_thread(worker.drive_run, run_id=run.id)  # queued -> running -> waiting for a person
        frames = await frames_until(comm, lambda f: any('data-status="waiting"' in x for x in f), timeout=15)
        await comm.disconnect()
        return first, frames

    first, frames = run_async(scenario())
    assert badge in first and 'data-status="queued"' in first
    shown = [re.search(r'data-status="(\w+)"', f).group(1) for f in frames]
    assert badge in frames[-1] and shown[-1] == "waiting"
    assert len(shown) == len(set(shown))  # a badge is sent when its status changed, not again with the same one


def test_an_inbox_the_layer_stops_telling_still_shows_each_decision_and_each_new_item(layer, desk, waiting_run, org,
                                                                                       approver, admin):
    from apps.accounts.actors import member_actor
    from apps.approvals.models import ApprovalRequest

    request = ApprovalRequest.objects.get(run_id=waiting_run.id)
    card = f'id="approval-{request.id}"'
    added = 'hx-swap-oob="beforeend:#inbox-items"'

    def another_held_call():
        run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=waiting_run.crew_id, inputs=A1001,
                                                         enqueue=False).id)
        return ApprovalRequest.objects.get(run_id=run.id)

    async def scenario():
        comm, first = await opened(f"/ws/inbox/{org.id}/", approver.user)
        await the_layer_forgets(org_group(org.id))
        await asyncio.to_thread(lambda: decisions.decide_approval(actor=member_actor(admin), approval_id=request.id,
                                                                 decision="reject", comment="not this one"))
        decided = await frames_until(comm, lambda f: any(card in x and "Rejected" in x for x in f), timeout=15)
        new = await asyncio.to_thread(another_held_call)
        frames = await frames_until(comm, lambda f: any(added in x for x in f), timeout=15)
        await comm.disconnect()
        return first, decided, new, frames

    first, decided, new, frames = run_async(scenario())
    assert card in first and "decide-form" in first
    assert "decide-form" not in decided[-1].split('id="inbox-empty"')[0] and added not in decided[-1]
    assert f'id="approval-{new.id}"' in frames[-1] and "decide-form" in frames[-1]
    assert sum(added in f for f in frames) == 1  # added once, however often the page catches up


def test_an_inbox_the_layer_stops_telling_shows_a_vote_on_an_item_that_still_waits(layer, desk, org, approver,
                                                                                    admin):
    from apps.accounts.actors import member_actor
    from apps.approvals.models import ApprovalRequest

    crew = desk.refund_desk(approvals_required=2)
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                     enqueue=False).id)
    request = ApprovalRequest.objects.get(run_id=run.id)
    card = f'id="approval-{request.id}"'

    async def scenario():
        comm, first = await opened(f"/ws/inbox/{org.id}/", approver.user)
        await the_layer_forgets(org_group(org.id))
        await asyncio.to_thread(lambda: decisions.decide_approval(actor=member_actor(admin), approval_id=request.id,
                                                                 decision="approve"))
        frames = await frames_until(comm, lambda f: any(card in x and "1 of 2 approvals" in x for x in f),
                                    timeout=15)
        await asyncio.sleep(CATCH_UP_S * 1.5)  # the next catch-up finds nothing new to send
        rest = []
        while not await comm.receive_nothing(timeout=0.1):
            rest.append(await comm.receive_from())
        await comm.disconnect()
        return first, frames, rest

    first, frames, rest = run_async(scenario())
    assert card in first and "0 of 2 approvals" in first
    assert "decide-form" in frames[-1]  # it still waits for a second person
    assert rest == []


def test_the_badge_banner_and_dashboard_the_layer_stops_telling_still_catch_up(layer, waiting_run, org, admin):
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from apps.accounts.actors import member_actor
    from apps.approvals.models import ApprovalRequest
    from apps.costs import services as costs

    actor = member_actor(admin)
    request = ApprovalRequest.objects.get(run_id=waiting_run.id)
    costs.set_model_price(actor=actor, model="my-llama", input_per_mtok=Decimal(1000), output_per_mtok=Decimal(0),
                          effective_from=timezone.now() - timedelta(days=1))
    costs.set_budget(actor=actor, scope="org", amount_usd="1", thresholds=[80])

    def decide_and_cross_80_percent():
        decisions.decide_approval(actor=actor, approval_id=request.id, decision="reject", comment="no")
        costs.record_usage(org_id=org.id, provider="openai_compatible", model="my-llama", input_tokens=900,
                           output_tokens=0)

    def shows_none_waiting(frames):
        return any(re.search(r'data-testid="tile-approvals-count">\s*0\s*<', f) for f in frames)

    async def scenario():
        badge, dashboard = communicator(f"/ws/org/{org.id}/", admin.user), communicator(f"/ws/dashboard/{org.id}/",
                                                                                      admin.user)
        assert (await badge.connect())[0] and (await dashboard.connect())[0]
        first_badge, first_tiles = await badge.receive_from(timeout=10), await dashboard.receive_from(timeout=10)
        await the_layer_forgets(org_group(org.id))
        await asyncio.to_thread(decide_and_cross_80_percent)
        badges = await frames_until(badge, lambda f: any('data-count="0"' in x for x in f)
                                    and any("budget-banner" in x for x in f), timeout=15)
        tiles = await frames_until(dashboard, shows_none_waiting, timeout=15)
        await badge.disconnect()
        await dashboard.disconnect()
        return first_badge, first_tiles, badges, tiles

    first_badge, first_tiles, badges, tiles = run_async(scenario())
    assert 'data-count="1"' in first_badge and re.search(r'tile-approvals-count">\s*1\s*<', first_tiles)
    banner = next(f for f in badges if "budget-banner" in f)
    assert "Budget 80 % used." in banner and "$0.90 of $1.00" in banner
    assert len(badges) == 2  # each sent once: the catch-up sends what changed, not what the page already shows
    assert len(tiles) == len(set(tiles))


def test_a_decision_by_someone_else_replaces_the_item_in_every_open_inbox(layer, waiting_run, org, approver, admin):
    from apps.accounts.actors import member_actor
    from apps.approvals.models import ApprovalRequest

    request = ApprovalRequest.objects.get(run_id=waiting_run.id)
    card = f'id="approval-{request.id}"'

    async def scenario():
        comm, first = await opened(f"/ws/inbox/{org.id}/", approver.user)  # the pending items as they stand
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lambda: decisions.decide_approval(actor=member_actor(admin), approval_id=request.id,
                                                                 decision="reject", comment="not this one"))
        frames = await frames_until(comm, lambda f: any(card in x and "Rejected" in x for x in f), timeout=30)
        await comm.disconnect()
        return first, frames[-1]

    first, frame = run_async(scenario())
    assert card in first and 'data-testid="decide-form"' in first
    assert "Rejected" in frame and admin.user.email in frame and "decide-form" not in frame
    assert 'hx-swap-oob' not in frame.split(card)[0]  # replaced in place, not added again
    assert 'id="inbox-empty"' in frame and "d-none" not in frame.split('id="inbox-empty"')[0].rsplit("<", 1)[-1]


def test_the_run_list_hears_status_changes_of_the_runs_it_shows(layer, desk, org, builder):
    crew = desk.refund_desk()
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    other = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    badge = f'id="run-status-{run.id}"'

    async def scenario():
        comm, first = await opened(f"/ws/runs/{org.id}/?runs={run.id},not-a-uuid", builder.user)
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lambda: (worker.drive_run(run_id=other.id), worker.drive_run(run_id=run.id)))
        frames = await frames_until(comm, lambda f: any('data-status="waiting"' in x for x in f), timeout=30)
        await comm.disconnect()
        return first, frames

    first, frames = run_async(scenario())
    assert badge in first and 'data-status="queued"' in first
    assert all(str(other.id) not in f for f in frames) and badge in frames[-1]
