"""SSRF: tricky spellings of internal addresses as server URLs, with AIRLOCK_EGRESS_ALLOW_PRIVATE
off. Each is refused with a readable reason: at registration (service, API, page) and again at
connect time; a listener on loopback proves that no connection was ever made."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import urlsplit

import httpx2
import pytest
from django.test import override_settings

from apps.accounts.actors import member_actor
from apps.approvals.definition_changes import inbox
from apps.core.egress import EgressRefused, check_url, guarded_transport
from apps.core.errors import ValidationFailed
from apps.registry import services
from apps.registry.models import McpServer
from tests.factories import owner_of, token_for
from tests.processes import run_async

pytestmark = pytest.mark.django_db

TRICKY = [
    "http://127.0.0.1:{port}/mcp",
    "http://127.1:{port}/mcp",  # short form
    "http://2130706433:{port}/mcp",  # decimal
    "http://0x7f000001:{port}/mcp",  # hex
    "http://0x7f.0.0.1:{port}/mcp",
    "http://0177.0.0.1:{port}/mcp",  # octal
    "http://017700000001:{port}/mcp",
    "http://[::1]:{port}/mcp",
    "http://[::ffff:127.0.0.1]:{port}/mcp",  # IPv4-mapped IPv6
    "http://[::ffff:7f00:1]:{port}/mcp",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/mcp",
    "http://[64:ff9b::7f00:1]:{port}/mcp",  # NAT64 of 127.0.0.1
    "http://[2002:7f00:1::]:{port}/mcp",  # 6to4 of 127.0.0.1
    "http://0.0.0.0:{port}/mcp",
    "http://0:{port}/mcp",
    "http://[::]:{port}/mcp",
    "http://localhost:{port}/mcp",
    "http://LocalHost.:{port}/mcp",  # case and trailing dot
    "http://user:pw@localhost:{port}/mcp",  # credentials before the host
    "http://127.0.0.1%2f@example.invalid:{port}/mcp",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/mcp",  # full-width digits
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[fe80::1]:{port}/mcp",  # link-local
    "http://[fe80::1%25eth0]:{port}/mcp",  # link-local with a zone id
    "http://[fe80::1%25lo]/",
    "http://[::1%25lo]:{port}/mcp",  # loopback with a zone id
    "http://[fe80::1%25nosuchif]/",  # a zone id naming no interface here
    "http://localhost./",  # trailing dot
    "http://localhost.:{port}/mcp",
    "http://localhost..:{port}/mcp",
    "http://127.0.0.1.:{port}/mcp",
    "http://2130706433.:{port}/mcp",
    "http://api.localhost:{port}/mcp",  # every name under localhost is loopback (RFC 6761)
    "http://[::ffff:169.254.169.254]/",
    "http://10.0.0.1:{port}/mcp",
    "http://172.16.0.1:{port}/mcp",
    "http://192.168.1.1:{port}/mcp",
    "http://100.64.0.1:{port}/mcp",  # carrier-grade NAT
    "http://198.18.0.1:{port}/mcp",  # benchmarking
    "http://224.0.0.1:{port}/mcp",  # multicast
    "http://255.255.255.255:{port}/mcp",
    "http://240.0.0.1:{port}/mcp",  # reserved
    "http://{hostname}:{port}/mcp",  # this machine's own name
]
NOT_HTTP = ["file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://127.0.0.1/", "ws://127.0.0.1/",
            "dict://127.0.0.1:11211/", "http://127.0.0.1:99999/", "http:///mcp"]


class Listener:
    """A loopback TCP port that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def listener():
    item = Listener()
    yield item
    item.close()


@pytest.fixture
def no_private():
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        yield


def _urls(port: int) -> list[str]:
    return [u.format(port=port, hostname=socket.gethostname()) for u in TRICKY]


def test_the_guard_refuses_every_tricky_address(listener, no_private):
    for url in _urls(listener.port) + NOT_HTTP:
        with pytest.raises(EgressRefused) as caught:
            check_url(url)
        assert str(caught.value), url
    assert listener.connections == 0


def _resolves(url: str) -> bool:
    """Only a public-looking name that resolves nowhere (example.invalid) may pass registration: every
    other form above is an internal address whatever DNS says, refused at once."""
    return not (urlsplit(url).hostname or "").endswith(".invalid")


def test_registering_them_is_refused_with_a_field_error(org, owner, listener, no_private):
    """Refused at once; a name that does not resolve here is accepted, and its sync then refuses."""
    actor = member_actor(owner)
    for i, url in enumerate(_urls(listener.port)):
        try:
            server = services.create_server(actor=actor, name=f"ssrf-{i}", transport="http", trust_tier="third_party",
                                            url=url, sync=False)
        except ValidationFailed as caught:
            assert "url" in caught.errors, url
            assert "blocked" in caught.errors["url"] or "invalid port" in caught.errors["url"], caught.errors
            continue
        assert not _resolves(url), f"{url} was registered although it resolves"
        report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
        assert report.status == "error" and "could not be resolved" in report.error, (url, report.error)
    assert McpServer.objects.filter(org=org).exclude(transport="builtin").count() == 1
    assert listener.connections == 0


def test_the_api_answers_422_naming_the_url(client, org, listener, no_private):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}
    for url in _urls(listener.port) + NOT_HTTP:
        response = client.post("/api/v1/servers", {"name": "ssrf", "transport": "http", "trust_tier": "internal",
                                                   "url": url}, content_type="application/json", **auth)
        if response.status_code == 201:  # a name that does not resolve here: the sync says so
            assert not _resolves(url), url
            server_id = response.json()["id"]
            sync = client.post(f"/api/v1/servers/{server_id}/sync", **auth).json()
            assert sync["status"] == "error" and "could not be resolved" in sync["error"], sync
            assert client.delete(f"/api/v1/servers/{server_id}", **auth).status_code == 204
            continue
        assert response.status_code == 422, (url, response.content)
        assert [e["field"] for e in response.json()["errors"]] == ["url"], url
        assert response.json()["detail"].startswith("url: ")
    assert listener.connections == 0


def test_the_registration_page_shows_the_reason(client, owner, listener, no_private):
    client.force_login(owner.user)
    response = client.post("/servers/", {"name": "meta", "transport": "http", "trust_tier": "internal",
                                         "url": "http://169.254.169.254/latest/meta-data/", "timeout_s": 30})
    assert response.status_code == 422
    assert "169.254.169.254" in response.content.decode() and "blocked" in response.content.decode()


def test_a_server_registered_while_allowed_is_refused_at_sync(client, org, listener):
    """The operator turned AIRLOCK_EGRESS_ALLOW_PRIVATE off after registration: every sync refuses."""
    actor = member_actor(owner_of(org))
    urls = _urls(listener.port)
    servers = [services.create_server(actor=actor, name=f"old-{i}", transport="http", trust_tier="internal", url=u,
                                      sync=False) for i, u in enumerate(urls)]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, 'admin')}"}
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        for server in servers:
            response = client.post(f"/api/v1/servers/{server.id}/sync", **auth)
            assert response.status_code == 200
            body = response.json()
            assert body["status"] == "error", server.url
            assert "blocked" in body["error"] or "could not be resolved" in body["error"], (server.url, body["error"])
    assert listener.connections == 0


def test_the_connect_time_check_holds_without_the_url_check(listener):
    """Second line: even a client that skipped check_url cannot connect (e.g. DNS changed since)."""

    async def attempt(url: str) -> BaseException | None:
        async with httpx2.AsyncClient(transport=guarded_transport(allow_private=False)) as http:
            try:
                await http.get(url, timeout=5)
            except Exception as exc:
                return exc
        return None

    for url in (f"http://localhost:{listener.port}/", f"http://127.0.0.1:{listener.port}/",
                f"http://[::ffff:127.0.0.1]:{listener.port}/", f"http://localhost.:{listener.port}/",
                f"http://127.0.0.1.:{listener.port}/", f"http://[::1%25lo]:{listener.port}/"):
        error = run_async(attempt(url))
        assert isinstance(error, EgressRefused), (url, error)
    assert listener.connections == 0
    # the same transport does connect where allowed: the refusals above are the guard's doing
    run_async(_allowed(listener.port))
    deadline = time.monotonic() + 5
    while listener.connections == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.connections >= 1


async def _allowed(port: int) -> None:
    async with httpx2.AsyncClient(transport=guarded_transport(allow_private=True)) as http:
        with contextlib.suppress(httpx2.HTTPError):  # the listener hangs up at once: the connection counts
            await http.get(f"http://127.0.0.1:{port}/", timeout=5)


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def do_POST(self):
        self.send_response(307)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args):
        pass


def test_redirects_are_never_followed(org, listener):
    """A server that answers with a redirect to an internal address: the redirect is not followed."""
    _Redirect.target = f"http://127.0.0.1:{listener.port}/mcp"
    httpd = HTTPServer(("127.0.0.1", 0), _Redirect)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        actor = member_actor(owner_of(org))
        server = services.create_server(actor=actor, name="redirector", transport="http", trust_tier="third_party",
                                        url=f"http://127.0.0.1:{httpd.server_address[1]}/mcp", sync=False,
                                        timeout_s=5)
        report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    finally:
        httpd.shutdown()
        thread.join(5)
    assert report.status == "error"
    assert "not followed" in report.error, report.error
    assert listener.connections == 0


def test_the_allow_list_lets_named_hosts_and_networks_through_and_nothing_else(listener, no_private):
    """AIRLOCK_EGRESS_ALLOW opens exactly what it names: a host name, or addresses inside a CIDR."""
    with override_settings(AIRLOCK_EGRESS_ALLOW=["model-box.internal", "127.0.0.0/30"]):
        assert check_url(f"http://127.0.0.1:{listener.port}/v1") == ["127.0.0.1"]
        assert check_url(f"http://2130706433:{listener.port}/v1") == ["127.0.0.1"]
        for url in (f"http://127.0.0.9:{listener.port}/", "http://169.254.169.254/", "http://[::1]/",
                    "http://10.0.5.1/", "http://[fe80::1%25lo]/"):
            with pytest.raises(EgressRefused):
                check_url(url)
    with override_settings(AIRLOCK_EGRESS_ALLOW=["localhost"]):
        assert check_url(f"http://LocalHost.:{listener.port}/") == check_url(f"http://localhost:{listener.port}/")
        with pytest.raises(EgressRefused):
            check_url("http://127.0.0.1/")  # the name is allowed, not the address behind it


def test_a_refusal_tells_the_operator_what_to_set(no_private):
    with pytest.raises(EgressRefused) as caught:
        check_url("http://localhost.:11434/v1")
    assert "AIRLOCK_EGRESS_ALLOW=localhost" in str(caught.value)
    assert "AIRLOCK_EGRESS_ALLOW_PRIVATE=1" in str(caught.value)


def test_a_bad_allow_list_entry_is_named(no_private):
    from django.core.exceptions import ImproperlyConfigured

    with override_settings(AIRLOCK_EGRESS_ALLOW=["10.0.5.0/33"]), pytest.raises(ImproperlyConfigured) as caught:
        check_url("http://example.com/")
    assert "'10.0.5.0/33'" in str(caught.value)


def test_manage_check_refuses_a_bad_allow_list_entry():
    """An operator's typo stops the processes at start (manage.py check), naming the entry."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "AIRLOCK_EGRESS_ALLOW": "ollama.internal,10.0.5.0/33"}
    bad = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert bad.returncode != 0 and "airlock.E010" in bad.stderr and "'10.0.5.0/33'" in bad.stderr, bad.stderr
    env["AIRLOCK_EGRESS_ALLOW"] = "ollama.internal,10.0.5.0/24,[fd00::/8]"
    good = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert good.returncode == 0, good.stderr
