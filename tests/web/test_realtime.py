"""Websockets: who may connect, and events crossing from a worker process to a browser."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
import websockets
from channels.testing.websocket import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils import timezone

from apps.core.models import WorkerCheck
from apps.core.services import answer_worker_check, request_worker_check
from config.asgi import application
from tests.factories import make_org, owner_of
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(membership) -> str:
    client = Client()
    client.force_login(membership.user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def _connect(path: str, cookie: str | None = None, origin: str = "http://testserver"):
    headers = [(b"origin", origin.encode()), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


def test_an_anonymous_socket_is_closed_with_4403(org):
    async def scenario():
        communicator, connected = await _connect(f"/ws/org/{org.id}/")
        closing = await communicator.receive_output()
        await communicator.disconnect()
        return connected, closing

    connected, closing = run_async(scenario())
    assert connected
    assert closing == {"type": "websocket.close", "code": 4403}


def test_a_member_of_another_org_is_closed_with_4403(org, outsider):
    cookie = session_cookie(outsider)

    async def scenario():
        communicator, _ = await _connect(f"/ws/org/{org.id}/", cookie)
        closing = await communicator.receive_output()
        await communicator.disconnect()
        return closing

    assert run_async(scenario()) == {"type": "websocket.close", "code": 4403}


def test_a_foreign_origin_is_refused_at_the_handshake(owner):
    cookie = session_cookie(owner)

    async def scenario():
        communicator, connected = await _connect(f"/ws/org/{owner.org_id}/", cookie, origin="https://evil.example")
        await communicator.disconnect()
        return connected

    assert run_async(scenario()) is False


def test_a_member_receives_the_inbox_badge_on_connect(owner):
    cookie = session_cookie(owner)

    async def scenario():
        communicator, _ = await _connect(f"/ws/org/{owner.org_id}/", cookie)
        first = await communicator.receive_from()
        await communicator.disconnect()
        return first

    badge = run_async(scenario())
    assert 'id="inbox-badge"' in badge
    assert 'hx-swap-oob="true"' in badge
    assert 'data-count="0"' in badge


async def _listen_for(url: str, cookie: str, org_id, marker: str, *, idle_first: float = 0.0,
                      trigger=None, timeout: float = 20.0) -> str:
    ws_url = url.replace("http://", "ws://") + f"/ws/org/{org_id}/"
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": url}
    async with websockets.connect(ws_url, additional_headers=headers) as socket:
        badge = await asyncio.wait_for(socket.recv(), timeout)
        assert "inbox-badge" in badge
        await asyncio.sleep(idle_first)
        if trigger:
            await asyncio.to_thread(trigger)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frame = await asyncio.wait_for(socket.recv(), deadline - time.monotonic())
            if marker in frame:
                return frame
    raise AssertionError(f"{marker} never arrived")


def test_an_event_published_by_a_worker_reaches_a_connected_browser(owner, live_url, worker):
    cookie = session_cookie(owner)
    checks = []
    frame = run_async(_listen_for(
        live_url, cookie, owner.org_id, "worker-check-",
        trigger=lambda: checks.append(request_worker_check(org_id=str(owner.org_id))),
    ))
    assert f'id="worker-check-{checks[0].id}"' in frame
    assert 'data-state="answered"' in frame


def test_an_idle_socket_still_receives_events_after_the_redis_read_timeout(owner, live_url, worker):
    """redis-py 8 defaults socket_timeout to 5 s; an idle consumer must survive it."""
    cookie = session_cookie(owner)
    frame = run_async(_listen_for(
        live_url, cookie, owner.org_id, "worker-check-", idle_first=7.0,
        trigger=lambda: request_worker_check(org_id=str(owner.org_id)),
    ))
    assert 'data-state="answered"' in frame


def test_the_check_worker_button_answers_with_a_waiting_state(client, owner):
    client.force_login(owner.user)
    response = client.post("/settings/system/check-worker/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert 'data-state="waiting"' in response.content.decode()


def test_a_worker_answer_that_beat_the_waiting_message_is_still_shown(client, owner):
    """The worker can answer before htmx has swapped in the message the pushed answer replaces;
    the waiting message then reads the answer it missed, and only its own organisation's."""
    check = WorkerCheck.objects.create(org=owner.org)  # requested; no worker has answered yet
    client.force_login(owner.user)
    url = f"/settings/system/check-worker/{check.id}/"
    assert client.get(url, HTTP_HX_REQUEST="true").status_code == 204  # nothing to swap yet

    answer_worker_check(org_id=str(owner.org_id), check_id=str(check.id), hostname="worker-7")
    answered = client.get(url, HTTP_HX_REQUEST="true")
    assert answered.status_code == 200
    assert 'data-state="answered"' in answered.content.decode()
    assert "worker-7" in answered.content.decode()

    client.force_login(owner_of(make_org("Globex")).user)
    assert client.get(url, HTTP_HX_REQUEST="true").status_code == 404


def test_a_worker_check_nobody_answers_stops_waiting_and_says_what_to_start(client, owner):
    check = WorkerCheck.objects.create(org=owner.org)
    WorkerCheck.objects.filter(id=check.id).update(created_at=timezone.now() - timedelta(minutes=3))
    client.force_login(owner.user)
    response = client.get(f"/settings/system/check-worker/{check.id}/", HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-state="silent"' in page
    assert "python -m config.worker" in page  # which consumes every queue (config/worker.py)
    assert "hx-get" not in page  # it stops asking


def test_the_redis_layer_never_times_out_idle_reads():
    if not settings.REDIS_URL:
        assert settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("DatabaseChannelLayer")
        return
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    assert host == {"address": settings.REDIS_URL, "socket_timeout": None}
    json.dumps(host)
