"""Open websockets follow their viewer's access: removing a member, signing a session out or changing
a password closes the sockets that lost access (4403) at once; a role change narrows what they show.
Against a real web server, on the Redis channel layer and on the embedded one (the database as bus)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from contextlib import contextmanager

import pytest
import websockets
from channels.layers import channel_layers
from django.conf import settings
from django.db import connections
from django.test import Client, override_settings

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.core import realtime
from apps.core.realtime import org_group
from tests.factories import PASSWORD, add_member
from tests.processes import ROOT, child_env, free_port, run_async, stop, wait_for_port

pytestmark = pytest.mark.django_db(transaction=True)

EMBEDDED = {"default": {"BACKEND": "apps.core.channel_layer.DatabaseChannelLayer", "CONFIG": {"poll_interval": 0.1}}}
MODES = ["embedded", "redis"] if settings.REDIS_URL else ["embedded"]
ORG_SOCKETS = ["org", "inbox", "runs", "dashboard"]
MARKER = "worker-987654"  # a worker name nobody has: it shows whether a frame sent after a change got through


@contextmanager
def embedded_server(log_dir):
    """A web server with no Redis: live updates through the database."""
    port = free_port()
    env = child_env()
    env.pop("REDIS_URL", None)
    log = log_dir / f"web-embedded-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
                                 "--port", str(port), "--no-access-log"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def embedded_url(django_db_setup, process_logs):
    with embedded_server(process_logs) as url:
        yield url


@pytest.fixture(params=MODES)
def server(request):
    """The server's URL, with this process publishing on the same kind of channel layer."""
    if request.param == "redis":
        url, layers = request.getfixturevalue("live_url"), settings.CHANNEL_LAYERS
    else:
        url, layers = request.getfixturevalue("embedded_url"), EMBEDDED
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        yield url
        realtime.flush()
    channel_layers.backends.clear()


def session_of(membership) -> tuple[Client, str]:
    client = Client()
    client.force_login(membership.user)
    return client, client.cookies[settings.SESSION_COOKIE_NAME].value


class Socket:
    """One page's websocket, read in the background so a test can ask what came and how it ended."""

    def __init__(self, url: str, path: str, cookie: str) -> None:
        self.url, self.path, self.cookie = url, path, cookie
        self.frames: list[str] = []
        self.close_code: int | None = None

    async def open(self) -> None:
        headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={self.cookie}", "Origin": self.url}
        self.ws = await websockets.connect(self.url.replace("http://", "ws://") + self.path,
                                           additional_headers=headers, open_timeout=10)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                self.frames.append(frame)
        except websockets.ConnectionClosed:
            pass
        self.close_code = self.ws.close_code

    async def wait_for(self, check, timeout: float = 30.0) -> bool:  # a busy machine renders slowly
        deadline = asyncio.get_running_loop().time() + timeout
        while not check(self):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def close(self) -> None:
        await self.ws.close()
        await self.reader


def closed(socket: Socket) -> bool:
    return socket.close_code is not None


def saw_marker(socket: Socket) -> bool:
    return any(str(MARKER) in f for f in socket.frames)


def path_of(kind: str, org_id) -> str:
    return f"/ws/{kind}/{org_id}/"


async def in_thread(fn, *args, **kwargs):
    """ORM work of the test (a service, a view through the test client) off the event loop, closing
    the thread's database connection after it (else the test database cannot be dropped)."""
    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


def publish_marker(org_id) -> None:
    realtime.publish(org_group(org_id), "system.worker_answered", check_id="marker", hostname=MARKER)
    realtime.flush()


def publish_inbox_nudge(org_id) -> None:
    realtime.publish(org_group(org_id), "inbox.count")
    realtime.flush()


def test_removing_a_member_closes_their_open_sockets_at_once(server, org, owner):
    member = add_member(org, "builder")
    _, cookie = session_of(member)

    async def scenario():
        sockets = [Socket(server, path_of(kind, org.id), cookie) for kind in ORG_SOCKETS]
        for socket in sockets:
            await socket.open()
        assert await sockets[0].wait_for(lambda s: len(s.frames) >= 1)  # connected: the inbox badge came
        await in_thread(services.remove_member, actor=member_actor(owner), member_id=member.id)
        await in_thread(publish_marker, org.id)  # what the organisation does next must not reach them
        for socket in sockets:
            assert await socket.wait_for(closed), f"{socket.path} stayed open"
        await asyncio.sleep(0.5)
        return {s.path: (s.close_code, saw_marker(s)) for s in sockets}

    result = run_async(scenario())
    assert result == {path_of(kind, org.id): (4403, False) for kind in ORG_SOCKETS}


def test_signing_out_closes_that_sessions_sockets_and_no_others(server, owner):
    leaving, leaving_cookie = session_of(owner)
    _, staying_cookie = session_of(owner)

    async def scenario():
        gone = Socket(server, path_of("org", owner.org_id), leaving_cookie)
        kept = Socket(server, path_of("org", owner.org_id), staying_cookie)
        for socket in (gone, kept):
            await socket.open()
            assert await socket.wait_for(lambda s: len(s.frames) >= 1)
        assert (await in_thread(leaving.post, "/logout/")).status_code == 302
        assert await gone.wait_for(closed), "the signed-out session's socket stayed open"
        await in_thread(publish_marker, owner.org_id)
        assert await kept.wait_for(saw_marker), "the other session's socket stopped receiving"
        outcome = (gone.close_code, kept.close_code)
        await kept.close()
        return outcome

    assert run_async(scenario()) == (4403, None)


def test_a_password_change_closes_every_socket_opened_with_the_old_password(server, owner):
    changing, changing_cookie = session_of(owner)
    _, other_cookie = session_of(owner)

    async def scenario():
        here = Socket(server, path_of("dashboard", owner.org_id), changing_cookie)
        elsewhere = Socket(server, path_of("org", owner.org_id), other_cookie)
        for socket in (here, elsewhere):
            await socket.open()
            assert await socket.wait_for(lambda s: len(s.frames) >= 1)
        new = "a-new-long-passphrase"
        response = await in_thread(changing.post, "/account/password/",
                                   {"old_password": PASSWORD, "new_password1": new, "new_password2": new})
        assert response.status_code == 302
        assert await elsewhere.wait_for(closed), "a session signed in with the old password kept its socket"
        # The changing session stays signed in under a new key (Django cycles it): the page it goes to
        # opens a socket with that, and the socket of the old key closes too.
        assert await here.wait_for(closed), "the socket of the changing session's old key stayed open"
        renewed = Socket(server, path_of("org", owner.org_id), changing.cookies[settings.SESSION_COOKIE_NAME].value)
        await renewed.open()
        assert await renewed.wait_for(lambda s: len(s.frames) >= 1)  # joined its groups
        await in_thread(publish_marker, owner.org_id)
        assert await renewed.wait_for(saw_marker), "the changing session cannot open a socket any more"
        outcome = (elsewhere.close_code, here.close_code, renewed.close_code)
        await renewed.close()
        return outcome

    assert run_async(scenario()) == (4403, 4403, None)


def test_a_role_change_narrows_what_open_sockets_show(server, org, owner):
    member = add_member(org, "admin")
    _, cookie = session_of(member)

    async def scenario():
        dashboard = Socket(server, path_of("dashboard", org.id), cookie)
        await dashboard.open()
        assert await dashboard.wait_for(lambda s: len(s.frames) >= 1)
        as_admin = dashboard.frames[-1]
        await in_thread(services.change_role, actor=member_actor(owner), member_id=member.id, role="viewer")
        await asyncio.sleep(1.0)  # the access change reaches the socket first (same channel, in order)
        count = len(dashboard.frames)
        await in_thread(publish_inbox_nudge, org.id)  # the dashboard re-renders its tiles
        assert await dashboard.wait_for(lambda s: len(s.frames) > count), "the socket stopped receiving"
        outcome = (as_admin, dashboard.frames[-1], dashboard.close_code)
        await dashboard.close()
        return outcome

    as_admin, as_viewer, close_code = run_async(scenario())
    assert close_code is None
    assert 'href="/audit/"' in as_admin  # the audit log tile is for admins and owners
    assert 'href="/audit/"' not in as_viewer
