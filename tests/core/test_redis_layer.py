"""The Redis channel layer's own connection handling, on uvloop as uvicorn runs it."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import uvloop
from django.conf import settings

from apps.core.redis_layer import ReconnectingPubSubChannelLayer

pytestmark = pytest.mark.stack


def test_a_subscribe_on_a_connection_the_server_dropped_reconnects_instead_of_failing():
    """Redis went away while no page was subscribed, so nothing read from the subscribing connection: its socket
    is closed while redis-py still counts it as connected. On uvloop the next subscribe's write raises
    RuntimeError ("the handler is closed"), not a connection error, and that page was refused: its socket
    closed (the reliability suite's first websocket after a Redis restart, once in a full run). The layer takes
    it as the connection error it is: reconnect, subscribe, carry on."""
    layer = ReconnectingPubSubChannelLayer(hosts=[{"address": settings.REDIS_URL, "socket_timeout": None}],
                                           prefix=f"layer-test-{time.monotonic_ns()}")

    async def scenario() -> dict:
        first = await layer.new_channel()  # the process's subscribing connection is open
        here = layer._get_layer()
        shard = here._get_shard(first)
        await shard.unsubscribe(first)  # the last page left
        await asyncio.sleep(0.5)  # its unsubscribe confirmed: nothing reads from the connection now
        shard._pubsub.connection._writer.transport.abort()  # the server went away under it
        await asyncio.sleep(0.3)
        second = await layer.new_channel()  # a page connecting next: subscribes on that connection
        await layer.group_add("page", second)
        await layer.group_send("page", {"type": "realtime.event", "event": "after"})
        received = await asyncio.wait_for(layer.receive(second), 5)
        await here.flush()
        return received

    # On a thread of its own: an earlier test of the suite may leave an event loop running on this one.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(uvloop.run, scenario()).result()["event"] == "after"
