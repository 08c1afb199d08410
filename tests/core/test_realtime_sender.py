"""The process's realtime sender: a burst of run nudges reaches a watcher as a few sends ending with the newest;
a run nobody watches costs no sends."""

from __future__ import annotations

import asyncio
import time

import pytest
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubLoopLayer

from apps.core import realtime
from apps.core.redis_layer import ReconnectingPubSubChannelLayer
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)


async def _drain(layer, channel: str) -> list[dict]:
    received = []
    while True:
        try:
            received.append(await asyncio.wait_for(layer.receive(channel), 1.0))
        except TimeoutError:
            return received


def _burst(group: str) -> float:
    """Publishes 200 nudges about 0.5 ms apart, then a status; returns how long until all were sent."""
    started = time.monotonic()
    for seq in range(1, 201):
        realtime.publish(group, "run.event", seq=seq)
        time.sleep(0.0005)
    realtime.publish(group, "run.status", status="succeeded")  # not a nudge: sent as it is, after them
    assert realtime.flush(5.0)
    return time.monotonic() - started


def test_a_burst_of_nudges_arrives_as_a_few_sends_ending_with_the_newest():
    layer = get_channel_layer()
    group = f"run.burst-{time.monotonic_ns()}"

    async def watch_a_burst() -> tuple[float, list[dict]]:
        # One loop for the watcher throughout: the embedded layer delivers from a task on it.
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        elapsed = await asyncio.to_thread(_burst, group)
        return elapsed, await _drain(layer, channel)

    elapsed, messages = run_async(watch_a_burst())
    nudges = [m["data"]["seq"] for m in messages if m["event"] == "run.event"]
    assert nudges[-1] == 200  # the newest always goes out: a watcher never stops short of the last event
    assert nudges == sorted(set(nudges))
    # at most one per interval (and the first at once): a worker's step does not pay a send per event
    assert len(nudges) <= elapsed / realtime.NUDGE_INTERVAL_S + 2
    assert [m["event"] for m in messages][-1] == "run.status"


@pytest.mark.stack  # the Redis layer's groups (the embedded layer sends every nudge: the test above)
def test_nudges_to_a_run_nobody_watches_cost_no_sends_and_a_page_that_joins_still_hears_the_newest(monkeypatch):
    """On the Redis layer a run's nudges first ask whether anybody is in its group: an empty group gets no
    sends, and a page that joins while its nudges are held back hears the newest one once the group's
    time as empty is over (it caught up from the table when it connected)."""
    layer = get_channel_layer()
    assert isinstance(layer, ReconnectingPubSubChannelLayer)
    group = f"run.unwatched-{time.monotonic_ns()}"
    sends = []
    original = RedisPubSubLoopLayer.group_send  # each event loop's layer (the sender thread has its own)

    async def group_send(self, to, message):
        if to == group:
            sends.append(message["data"]["seq"])
        return await original(self, to, message)

    monkeypatch.setattr(RedisPubSubLoopLayer, "group_send", group_send)

    async def join_after_a_burst() -> list[dict]:
        await asyncio.to_thread(_nudges, group, range(1, 51))
        assert sends == []  # nobody in the group: nothing sent
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await asyncio.to_thread(_nudges, group, range(51, 53))  # still taken as empty: held back
        return await _drain(layer, channel)

    received = [m["data"]["seq"] for m in run_async(join_after_a_burst())]
    assert received[-1] == 52 and received == sends  # the newest reaches the page, once its time as empty is over
    assert len(received) <= 2


def _nudges(group: str, seqs) -> None:
    for seq in seqs:
        realtime.publish(group, "run.event", seq=seq)
        time.sleep(0.0005)
    assert realtime.flush(5.0)
