"""The web process's channel layer through a Redis restart: the first websocket after Redis comes back
connects and gets its frames (the layer's pooled connections died with the old server)."""

from __future__ import annotations

import asyncio
import time

import pytest
import websockets
from django.conf import settings
from django.test import Client

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
