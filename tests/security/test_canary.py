"""The secrets canary: one unique secret set, through the API, in every secret field the product has:
an LLM connection's API key, MCP servers' environment values, an HTTP server's headers and bearer
token, a webhook's signing secret; and a gateway key, which Airlock makes. A full run on the real
worker (a held refund approved through the API) uses them all, and the remote services quote the
secret back as careless ones do: the provider in a 500 and then in a 401 that fails a second run
("Incorrect API key provided: <key>"), an MCP server in an error result, a JSON-RPC error and its
stderr, the webhook receiver in its error answer; a call through the gateway meets the same server.
Afterwards the secrets, in any spelling (plain, URL-encoded, hex, base64 at every alignment), appear
in no API answer (but the one that creates each), no page, no export, no webhook body, no log line of
the test, web, worker and gateway processes, no row of any table, no Celery task message, no
channel-layer message and no websocket frame; and they did reach the places they belong (so the test
cannot pass by never using them)."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import logging
import re
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import redis
import requests
import websockets
from celery.signals import before_task_publish
from django.conf import settings
from django.db import connection
from django.test import Client

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.agents.models import LlmConnection
from apps.crews import services as crew_services
from apps.notifications.models import WebhookDelivery
from apps.notifications.services import verify
from apps.registry.models import McpServer
from apps.registry.pool import pool
from apps.runs.models import Run, ToolCall
from tests.agents.fake_llm import FakeLLM
from tests.factories import token_for, wait_for_run
from tests.gateway.conftest import mcp_client, wait_for_ledgers
from tests.processes import free_port, run_async, wait_for_port
from tests.registry.conftest import SERVERS as REGISTRY_SERVERS
from tests.security.routes import operations, pages

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.stack]  # Redis MONITOR, Postgres's catalog

ROOT = Path(__file__).resolve().parents[2]
WITNESS = Path(__file__).resolve().parent / "servers" / "witness.py"
ECHO = Path(__file__).resolve().parent / "servers" / "echo_secrets.py"
TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "limit_exceeded"}


def spellings(secret: str) -> dict[str, str]:
    """Every way the secret could be written down: plain, URL-encoded, hex, and the characters of its
    base64 (standard and URL-safe) that do not depend on what precedes or follows it, at each of the
    three byte alignments it can have inside a longer encoded string (e.g. "Bearer <secret>")."""
    raw = secret.encode()
    found = {"plain": secret, "url": quote(secret, safe=""), "url_plus": quote_plus(secret), "hex": raw.hex(),
             "json_ascii": json.dumps(secret)[1:-1]}
    for shift in range(3):
        start, end = -(-8 * shift // 6), 8 * (shift + len(raw)) // 6
        for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            found[f"{name}@{shift}"] = encode(b"\0" * shift + raw).decode()[start:end]
    return found


def leaks(text: str, forms: dict[str, str]) -> list[str]:
    return [name for name, form in forms.items() if form in text]


def _redis_unescape(arg: str) -> bytes:
    """An argument of a MONITOR line (Redis writes it with sdscatrepr escapes) back to its bytes."""
    out, i = bytearray(), 0
    simple = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}
    while i < len(arg):
        if arg[i] == "\\" and i + 1 < len(arg):
            nxt = arg[i + 1]
            if nxt == "x" and i + 3 < len(arg):
                out.append(int(arg[i + 2:i + 4], 16))
                i += 4
                continue
            out += simple.get(nxt, nxt.encode())
            i += 2
            continue
        out += arg[i].encode()
        i += 1
    return bytes(out)


class RedisMonitor(threading.Thread):
    """Every command every process sends to Redis while it runs (task messages, channel-layer
    messages), read with MONITOR."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.lines, self.stop, self.ready = url, [], threading.Event(), threading.Event()

    def run(self) -> None:
        conn = redis.Redis.from_url(self.url).connection_pool.make_connection()
        conn.connect()
        conn.send_command("MONITOR")
        conn.read_response()
        self.ready.set()
        while not self.stop.is_set():
            if conn.can_read(timeout=0.2):
                line = conn.read_response()
                self.lines.append(line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line))
        conn.disconnect()

    def task_messages(self, key_prefix: str) -> list[dict]:
        """Task messages LPUSHed to this session's queues, decoded (headers and body)."""
        found = []
        for line in self.lines:
            args = [_redis_unescape(a) for a in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]
            if len(args) >= 3 and args[0].upper() == b"LPUSH" and args[1].startswith(key_prefix.encode()):
                for value in args[2:]:
                    message = json.loads(value)
                    if message.get("properties", {}).get("body_encoding") == "base64":
                        message["body"] = json.loads(base64.b64decode(message["body"]))
                    found.append(message)
        return found


@pytest.fixture
def canary():
    return f"cnry-{secrets.token_hex(10)}+{secrets.token_hex(6)}/{secrets.token_hex(4)}"


@pytest.fixture
def guarded_http(tmp_path, canary):
    """An HTTP MCP server that answers only `Authorization: Bearer <canary>` (401 otherwise)."""
    port = free_port()
    log = tmp_path / "guarded.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(REGISTRY_SERVERS / "token_http.py"), str(port)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, env={"MCP_TOKEN": canary, "PATH": "/usr/bin"})
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        pool.close_all()
        proc.kill()
        proc.wait()


class EchoingReceiver:
    """A webhook receiver that refuses every delivery and, in its error answer, quotes the signing secret
    it was configured with (as a receiver whose signature check failed may), recording what it got."""

    def __init__(self, secret: str) -> None:
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"headers": dict(self.headers), "body": body})
                answer = json.dumps({"error": f"signature mismatch: expected a v1 HMAC made with {secret}"}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver(canary):
    r = EchoingReceiver(canary)
    yield r
    r.server.shutdown()


@pytest.fixture
def published():
    """Task messages published by this test process (before_task_publish)."""
    sent = []

    def record(sender=None, body=None, headers=None, **_):
        sent.append({"task": sender, "headers": dict(headers or {}), "body": body})

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


async def _collect_frames(live_url: str, cookie: str, paths: list[str], frames: dict, stop: threading.Event,
                          opened: threading.Event) -> None:
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": live_url}
    base = live_url.replace("http://", "ws://")

    async def listen(path: str, socket) -> None:
        while not stop.is_set():
            try:
                frames[path].append(await asyncio.wait_for(socket.recv(), 0.3))
            except TimeoutError:
                continue

    sockets = [await websockets.connect(base + path, additional_headers=headers) for path in paths]
    opened.set()
    try:
        await asyncio.gather(*(listen(path, s) for path, s in zip(paths, sockets, strict=True)))
    finally:
        for s in sockets:
            await s.close()


_wait_for = functools.partial(wait_for_run, timeout=90)


def _scan_tables(forms: dict[str, str]) -> dict[str, list[str]]:
    """Every base table of the test database, each whole row cast to text, searched for every spelling."""
    hits = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables "
                       "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1")
        tables = [row[0] for row in cursor.fetchall()]
        for table in tables:
            for name, form in forms.items():
                cursor.execute(f'SELECT count(*) FROM "{table}" AS r WHERE strpos(r::text, %s) > 0', [form])
                if cursor.fetchone()[0]:
                    hits.setdefault(table, []).append(name)
    assert len(tables) > 30  # the scan really covered the schema
    return hits


def test_the_canary_reaches_only_where_it_belongs(canary, guarded_http, live_url, worker, gateway_url, org, owner,
                                                  process_logs, tmp_path, caplog, published, receiver):
    caplog.set_level(logging.DEBUG)
    forms = spellings(canary)
    for prefix in (b"", b"Bearer ", b"Bearer  ", b"x"):  # the spellings find it inside longer encodings
        assert leaks(base64.b64encode(prefix + canary.encode() + b"!").decode(), forms)
        assert leaks(base64.urlsafe_b64encode(prefix + canary.encode()).decode(), forms)
    answers: list[tuple[str, str]] = []  # (what, body) of every HTTP answer we got
    monitor = RedisMonitor(settings.REDIS_URL)
    monitor.start()
    assert monitor.ready.wait(10)

    admin = {"Authorization": f"Bearer {token_for(org, 'admin', name='canary admin')}"}
    approver = {"Authorization": f"Bearer {token_for(org, 'approver', name='canary approver')}"}
    http = requests.Session()

    def call(method: str, path: str, headers=admin, **kwargs) -> requests.Response:
        response = http.request(method, live_url + path, headers=headers, timeout=60, **kwargs)
        answers.append((f"{method} {path}", response.text))
        return response

    data = tmp_path / "orders.json"
    with FakeLLM("openai") as fake:
        # 1. The secret goes in through the API, in all three places.
        made = call("POST", "/api/v1/llm-connections", json={
            "name": "Canary LLM", "provider": "openai_compatible", "base_url": fake.base_url, "api_key": canary,
            "default_model": "gpt-4o-mini"})
        assert made.status_code == 201, made.text
        connection_id = made.json()["id"]
        tested = call("POST", f"/api/v1/llm-connections/{connection_id}/test", json={"model": "gpt-4o-mini"})
        assert tested.status_code == 200 and tested.json()["ok"], tested.text
        fake.replies = [(401, {"error": {"message": f"Incorrect API key provided: {canary}."}})]
        tested = call("POST", f"/api/v1/llm-connections/{connection_id}/test", json={"model": "gpt-4o-mini"})
        assert tested.status_code == 200 and not tested.json()["ok"], tested.text
        assert "Incorrect API key provided: [redacted]" in tested.json()["message"]
        hook = http.post(live_url + "/api/v1/webhooks", headers=admin, timeout=60, json={
            "name": "Canary hook", "url": receiver.url, "events": ["*"], "secret": canary})
        assert hook.status_code == 201 and hook.json()["secret"] == canary, hook.text  # shown once, where it belongs
        servers = {}
        for body in (
            {"name": "orders", "transport": "stdio", "trust_tier": "internal", "command": sys.executable,
             "args": ["-m", "apps.demo.order_desk", "stdio"], "cwd": str(ROOT),
             "env": {"ORDER_DESK_DATA": str(data), "ORDER_DESK_API_KEY": canary}},
            {"name": "witness", "transport": "stdio", "trust_tier": "internal", "command": sys.executable,
             "args": [str(WITNESS)], "cwd": str(ROOT),
             "env": {"WITNESS_SECRET": canary, "WITNESS_SHA256": hashlib.sha256(canary.encode()).hexdigest()}},
            {"name": "guarded", "transport": "http", "trust_tier": "internal", "url": guarded_http,
             "bearer_token": canary, "headers": {"X-Api-Key": canary}},
            {"name": "echo", "transport": "stdio", "trust_tier": "internal", "command": sys.executable,
             "args": [str(ECHO)], "cwd": str(ROOT), "env": {"ECHO_SECRET": canary}},
        ):
            made = call("POST", "/api/v1/servers", json=body)
            assert made.status_code == 201, made.text
            servers[body["name"]] = made.json()["id"]
            synced = call("POST", f"/api/v1/servers/{made.json()['id']}/sync")
            assert synced.status_code == 200 and synced.json()["status"] == "ok", synced.text

        # 2. An agent on that connection using all three servers; the refund waits for a person.
        actor = member_actor(owner)
        agent = agent_services.create_agent(
            actor=actor, name="Canary clerk", connection_id=connection_id, model="gpt-4o-mini",
            grants=[{"tool": "orders.get_order_status", "policy": "auto"},
                    {"tool": "witness.check_env", "policy": "auto"}, {"tool": "guarded.ping", "policy": "auto"},
                    {"tool": "echo.report", "policy": "auto"}, {"tool": "echo.sync", "policy": "auto"},
                    {"tool": "orders.refund_order", "policy": "approve"}])
        made = http.post(live_url + "/api/v1/gateway-keys", headers=admin, timeout=60,
                         json={"name": "Canary host", "agent_id": str(agent.id)})
        assert made.status_code == 201, made.text
        gateway_key = made.json()["value"]  # shown once, where it belongs
        forms |= {f"gateway key {name}": form for name, form in spellings(gateway_key).items()}
        crew = crew_services.create_crew(
            actor=actor, name="Canary crew", process="sequential",
            inputs=[{"name": "order_id", "type": "string", "required": True}],
            tasks=[{"name": "refund", "agent_id": agent.id, "description": "Refund order {order_id}.", "context": []}])
        fake.replies = [
            (200, {"tool_call": ("orders__get_order_status", {"order_id": "A-1001"})}),
            (500, {"error": {"message": f"Upstream overloaded while checking key {canary}"}}),  # retried
            (200, {"tool_call": ("witness__check_env", {})}),
            (200, {"tool_call": ("guarded__ping", {})}),
            (200, {"tool_call": ("echo__report", {})}),
            (200, {"tool_call": ("echo__sync", {})}),
            (200, {"tool_call": ("orders__refund_order", {"order_id": "A-1001", "amount_cents": 500,
                                                          "request_id": "canary-refund"})}),
            (200, {"text": "Refunded.\nSTATUS: done\nREASON: refunded after approval"}),
        ]

        # 3. The run, watched live on its page, the inbox, the run list and the org socket.
        client = Client()
        client.force_login(owner.user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        in_process_api = Client(headers=admin)
        started = in_process_api.post(f"/api/v1/crews/{crew.id}/runs", {"inputs": {"order_id": "A-1001"}},
                                      content_type="application/json")
        answers.append(("POST start run", started.content.decode()))
        assert started.status_code == 201, started.content
        run_id = started.json()["id"]
        paths = [f"/ws/run/{run_id}/", f"/ws/inbox/{org.id}/", f"/ws/runs/{org.id}/", f"/ws/org/{org.id}/"]
        frames = {path: [] for path in paths}
        stop, opened = threading.Event(), threading.Event()
        listener = threading.Thread(target=run_async, daemon=True,
                                    args=(_collect_frames(live_url, cookie, paths, frames, stop, opened),))
        listener.start()
        assert opened.wait(20)

        _wait_for(run_id, {"waiting", *TERMINAL})
        pending = call("GET", "/api/v1/approvals?status=pending", headers=approver).json()
        assert [item["tool"] for item in pending["items"]] == ["orders.refund_order"]
        approval_id = pending["items"][0]["id"]
        decided = call("POST", f"/api/v1/approvals/{approval_id}/decision", headers=approver,
                       json={"decision": "approve", "comment": "ok"})
        assert decided.status_code == 200, decided.text
        run = _wait_for(run_id, TERMINAL)
        assert run.status == "succeeded", run.error

        # 4. A second run meets the provider's 401, which quotes the key; the run fails and says why.
        fake.replies = [(401, {"error": {"message": f"Incorrect API key provided: {canary}. You can find your "
                                                    "API key at https://platform.example/account/api-keys."}})]
        started = in_process_api.post(f"/api/v1/crews/{crew.id}/runs", {"inputs": {"order_id": "A-1002"}},
                                      content_type="application/json")
        answers.append(("POST start run 2", started.content.decode()))
        assert started.status_code == 201, started.content
        failed_id = started.json()["id"]
        failed = _wait_for(failed_id, TERMINAL)
        assert failed.status == "failed" and "Incorrect API key provided: [redacted]" in failed.error, failed.error

        # 5. An outside MCP host calls the same server through the gateway with the gateway key.
        async def through_gateway():
            async with mcp_client(gateway_url, gateway_key) as client:
                return await client.call_tool("echo.report", {})

        through = run_async(through_gateway())
        assert through.is_error and "[redacted]" in json.dumps(through.model_dump(mode="json"))
        answers.append(("gateway echo.report", json.dumps(through.model_dump(mode="json"))))
        wait_for_ledgers(gateway_url)

        deadline = time.monotonic() + 60  # the receiver refused run 2's run.finished, quoting the secret
        while time.monotonic() < deadline and not WebhookDelivery.objects.filter(
                notification__payload__run_id=failed_id, attempts__gte=1).exclude(last_error="").exists():
            time.sleep(0.2)
        time.sleep(1.5)  # the last live frames
        stop.set()
        listener.join(10)
        # the failed run's page socket sends its panels and events as they stand
        replay = {f"/ws/run/{failed_id}/": []}
        stop, opened = threading.Event(), threading.Event()
        listener = threading.Thread(target=run_async, daemon=True,
                                    args=(_collect_frames(live_url, cookie, list(replay), replay, stop, opened),))
        listener.start()
        assert opened.wait(20)
        time.sleep(2)
        stop.set()
        listener.join(10)
        frames.update(replay)

    # --- It reached where it belongs (otherwise nothing below would mean anything) ---------------
    assert fake.requests and all(r["headers"]["authorization"] == f"Bearer {canary}" for r in fake.requests)
    assert len(fake.requests) >= 6  # the connection test and five turns of the run
    assert not [r for r in fake.requests if leaks(json.dumps(r["body"]), forms)], "a secret went into a prompt"
    calls = {c.qualified_name: c for c in ToolCall.objects.filter(run_id=run_id)}
    assert calls["witness.check_env"].state == "succeeded" and "env ok" in json.dumps(calls["witness.check_env"].result)
    assert calls["guarded.ping"].state == "succeeded" and "pong" in json.dumps(calls["guarded.ping"].result)
    assert calls["orders.refund_order"].state == "succeeded"
    assert "canary-refund" in json.loads(data.read_text())["refunds"]
    assert LlmConnection.objects.get(id=connection_id).api_key == canary  # stored, encrypted (scan below)
    assert McpServer.objects.get(id=servers["witness"]).env["WITNESS_SECRET"] == canary
    assert McpServer.objects.get(id=servers["guarded"]).headers == {"Authorization": f"Bearer {canary}",
                                                                     "X-Api-Key": canary}
    # the remote services quoted it back, and what was stored says so without it
    assert calls["echo.report"].state == "failed" and "refused key [redacted]" in calls["echo.report"].error
    assert calls["echo.sync"].state == "failed" and "sync failed" in calls["echo.sync"].error
    bodies = [hit for hit in receiver.received if failed_id in hit["body"].decode()]
    assert bodies and all(verify(canary, h["headers"]["X-Airlock-Timestamp"], h["body"],
                                 h["headers"]["X-Airlock-Signature"]) for h in receiver.received)
    assert any('"run.finished"' in h["body"].decode() for h in bodies)
    refused = WebhookDelivery.objects.filter(notification__payload__run_id=failed_id).exclude(last_error="").first()
    assert refused is not None and "HTTP 401" in refused.last_error and "[redacted]" in refused.last_error, refused
    answers += [(f"webhook body {h['headers']['X-Airlock-Event']}", h["body"].decode()) for h in receiver.received]

    # --- Every GET API route for these objects (the real web process) ---------------------------
    tools = {t["qualified_name"]: t["id"] for t in call("GET", "/api/v1/tools?limit=100").json()["items"]}
    runs = [str(r) for r in Run.objects.filter(org=org).values_list("id", flat=True)]  # + the gateway's session
    assert {run_id, failed_id} < set(runs)
    choices = {"server_id": list(servers.values()), "tool_id": list(tools.values()), "connection_id": [connection_id],
               "agent_id": [str(agent.id)], "crew_id": [str(crew.id)], "run_id": runs, "approval_id": [approval_id],
               "tool_call_id": [str(c) for c in ToolCall.objects.filter(run__org=org).values_list("id", flat=True)]}
    reached = 0
    for op in operations():
        if op.method != "get" or any(p not in choices for p in op.params):
            continue
        required = {p["name"] for p in op.operation.get("parameters", [])
                    if p.get("in") == "query" and p.get("required")}
        if required - {"a", "b"}:
            continue
        for value in (choices[op.params[0]] if op.params else [None]):
            path = op.url({op.params[0]: value}) if op.params else op.path
            if required:  # the run comparison: the run that echoed the canary beside the failed one
                response = call("GET", f"{path}?a={run_id}&b={failed_id}")
            else:
                response = call("GET", path + ("?limit=1000" if not op.params or path.endswith("/events") else ""))
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
            reached += 1
    assert reached >= 25

    # --- Every page and export for these objects, plain and as htmx partials --------------------
    seen_pages = {}
    for page in pages():
        if page.route in ("logout/",) or page.route.startswith("account/reset/<"):
            continue
        if any(p not in choices for p in page.params):
            continue
        for value in (choices[page.params[0]] if page.params else [None]):
            # a page under another object (a run's tool call) takes the first of each further kind
            ids = {page.params[0]: value, **{p: choices[p][0] for p in page.params[1:]}} if page.params else {}
            url = page.url(ids)
            for htmx in (False, True):
                response = client.get(url, **({"HTTP_HX_REQUEST": "true"} if htmx else {}))
                raw = b"".join(response.streaming_content) if response.streaming else response.content
                body = raw.decode("utf-8", "replace")
                answers.append((f"page {url} htmx={htmx}", body))
                seen_pages[url] = response.status_code
    for must in (f"/servers/{servers['echo']}/", f"/agents/{agent.id}/", f"/runs/{run_id}/", f"/runs/{failed_id}/",
                 f"/runs/{failed_id}/trace.json", "/settings/notifications/", "/audit/", "/inbox/",
                 f"/runs/{run_id}/trace.json", "/audit/export.csv", "/costs/export.csv", "/runs/export.csv",
                 f"/agents/connections/{connection_id}/"):
        assert seen_pages.get(must) == 200, (must, seen_pages.get(must))
    assert "canary-refund" in dict(answers)[f"page /runs/{run_id}/trace.json htmx=False"]

    # --- Nothing we were answered holds the secret ----------------------------------------------
    leaked = [(what, leaks(body, forms)) for what, body in answers if leaks(body, forms)]
    assert not leaked, leaked

    # --- No websocket frame (run page, inbox, run list, org) -------------------------------------
    run_frames = frames[paths[0]]
    assert any(" run.finished " in f for f in run_frames) and any(" approval.requested " in f for f in run_frames)
    leaked = [(path, leaks(f, forms)) for path, fs in frames.items() for f in fs if leaks(f, forms)]
    assert not leaked, leaked

    # --- No Celery task message, no channel-layer message (everything that went through Redis) ----
    monitor.stop.set()
    monitor.join(10)
    messages = monitor.task_messages(f"{settings.RUN_ID}:")
    ours = [m for m in messages if run_id in json.dumps(m["body"])]
    assert {m["headers"]["task"] for m in ours} >= {"apps.runs.tasks.execute_run", "apps.runs.tasks.resume_run"}
    uuid_like = re.compile(r"^[0-9a-f-]{36}$")
    for m in messages:
        args, kwargs, _embed = m["body"]
        assert not kwargs and all(isinstance(a, str) and uuid_like.match(a) for a in args), m["headers"]["task"]
    assert [m for m in published if run_id in json.dumps(m["body"])]  # and the ones this process sent
    assert not [m for m in published if leaks(json.dumps(m, default=str), forms)]
    assert any(f"run.{run_id}" in line for line in monitor.lines)  # the run's group messages crossed Redis
    leaked = [leaks(line, forms) for line in monitor.lines if leaks(line, forms)]
    assert not leaked, leaked
    # every process's log, also those other tests keep in folders of their own here (tests/reliability)
    log_files = [p for p in process_logs.rglob("*") if p.is_file()]
    worker_logs = [p for p in log_files if p.name.startswith("worker-")]
    task_ids = [m["headers"]["id"] for m in ours]
    assert any(tid in p.read_text(errors="replace") for p in worker_logs for tid in task_ids)

    # --- No log line: this process, the web server, the worker ---------------------------------
    assert caplog.records
    assert not leaks(caplog.text, forms)
    assert not [r for r in caplog.records if leaks(repr(r.args) + str(r.msg) + str(r.exc_text), forms)]
    logs = log_files
    assert any(p.name.startswith("web-") for p in logs) and worker_logs
    leaked = [(p.name, leaks(p.read_text(errors="replace"), forms)) for p in logs
              if leaks(p.read_text(errors="replace"), forms)]
    assert not leaked, leaked

    # --- No row of any table (run events, steps, tool calls, audit, approvals, usage, ...) -------
    assert _scan_tables(forms) == {}
    control = _scan_tables({"request id": "canary-refund"})  # the same scan finds what is there
    assert {"runs_toolcall", "approvals_approvalrequest"} <= set(control), control
