"""The web process's channel layer through a Redis restart: the first websocket after Redis comes back
connects and gets its frames (the layer's pooled connections died with the old server), and a page that was open
through the restart hears what is sent after it (the process subscribes again)."""

from __future__ import annotations

import asyncio
import time

import pytest
import websockets
from django.conf import settings
from django.test import Client
from django.utils.module_loading import import_string

from apps.core.realtime import CONSUMER_HANDLER, org_group
from tests.factories import make_org, owner_of
from tests.processes import free_port, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(membership) -> str:
    client = Client()
    client.force_login(membership.user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def first_frame(url: str, cookie: str, org_id) -> str:
    ws_url = url.replace("http://", "ws://") + f"/ws/org/{org_id}/"
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": url}
    async with websockets.connect(ws_url, additional_headers=headers, open_timeout=10) as socket:
        return await asyncio.wait_for(socket.recv(), 10)


def test_the_first_websocket_after_a_redis_restart_connects_and_gets_its_frames(cluster, broker):
    owner = owner_of(make_org("Through a restart"))
    cookie = session_cookie(owner)
    port = free_port()
    cluster.web(port)
    url = f"http://127.0.0.1:{port}"
    assert "inbox-badge" in run_async(first_frame(url, cookie, owner.org_id))

    broker.stop()
    time.sleep(1)
    broker.start()

    assert "inbox-badge" in run_async(first_frame(url, cookie, owner.org_id))


async def heard_after_a_restart(url: str, cookie: str, org_id, broker) -> str:
    """Opens the organisation's socket, restarts Redis, then sends the page a worker's answer every half second
    (the web process may still be reconnecting) until a frame comes or 20 s pass."""
    ws_url = url.replace("http://", "ws://") + f"/ws/org/{org_id}/"
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": url}
    config = settings.CHANNEL_LAYERS["default"]  # the web process's layer, on the private Redis
    layer = import_string(config["BACKEND"])(**{**config["CONFIG"], "hosts": [{"address": broker.url}]})
    message = {"type": CONSUMER_HANDLER, "event": "system.worker_answered",
               "data": {"check_id": "restart", "hostname": "after-the-restart"}}
    async with websockets.connect(ws_url, additional_headers=headers, open_timeout=10) as socket:
        await asyncio.wait_for(socket.recv(), 10)  # the badge, as the page stands
        await asyncio.to_thread(broker.stop)
        await asyncio.sleep(1)
        await asyncio.to_thread(broker.start)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            await layer.group_send(org_group(org_id), message)
            try:
                return await asyncio.wait_for(socket.recv(), 0.5)
            except TimeoutError:
                continue
    return ""


def test_a_page_open_through_a_redis_restart_still_hears_what_is_sent_after_it(cluster, broker):
    owner = owner_of(make_org("Open through a restart"))
    cookie = session_cookie(owner)
    port = free_port()
    cluster.web(port)

    frame = run_async(heard_after_a_restart(f"http://127.0.0.1:{port}", cookie, owner.org_id, broker))

    assert 'data-state="answered"' in frame and "after-the-restart" in frame
