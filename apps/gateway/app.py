"""The gateway's ASGI app: `/mcp` (bearer auth, then the era router over two session managers of the
one `GatewayServer`) and `/healthz`, with the lifespan that starts and stops the `Gateway`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
from django.conf import settings
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.connection import LOG_LEVEL_META_KEY
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.gateway.server import METADATA_PATH, Gateway, GatewayServer, auth_error_response, metadata_url, resource_url


async def protected_resource_metadata(request: Request) -> JSONResponse:
    """RFC 9728: this gateway is an OAuth protected resource; Airlock's web app authorizes it."""
    return JSONResponse({
        "resource": resource_url(),
        "authorization_servers": [settings.AIRLOCK_BASE_URL.rstrip("/")],
        "scopes_supported": ["mcp:tools"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Airlock MCP gateway",
    }, headers={"Cache-Control": "max-age=300"})


def transport_security() -> TransportSecuritySettings:
    """Host and Origin checks (DNS-rebinding protection) from ALLOWED_HOSTS and the gateway's origins."""
    hosts = [h for h in settings.ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")]
    origins = list(getattr(settings, "AIRLOCK_GATEWAY_ALLOWED_ORIGINS", []) or [])
    origins += list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []) or [])
    for host in hosts:
        origins += [f"http://{host}", f"https://{host}", f"http://{host}:*", f"https://{host}:*"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)], allowed_origins=origins)


class EraRouter:
    """Sends each request to one of two session managers over the same server.

    Handshake-era requests (sessions, GET streams) and 2026-07-28 requests that may stream
    (a progress token, a log level, `subscriptions/listen`) go to the SSE manager; other 2026-07-28 requests
    to a JSON-response one, which answers in the request's own task (about 40% less time per
    call here than committing the SSE machinery for a response that never streams). A
    `tools/call` over its key's rate is answered here, HTTP 429, and a key answered from memory that no
    longer stands, HTTP 401, when the request may act (`Gateway.admission`)."""

    def __init__(self, sse: StreamableHTTPSessionManager, plain: StreamableHTTPSessionManager, limit: int,
                 gateway: Gateway) -> None:
        self.sse, self.plain, self.limit, self.gateway = sse, plain, limit, gateway

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            await self.sse.handle_request(scope, receive, send)
            return
        body = await self._body(scope, receive, send)
        if body is None:
            return
        # Before the session managers: once the SSE one takes a request, its HTTP status is 200 whatever
        # the answer, and a refused call must say 429 with Retry-After (401 for a key that no longer stands).
        refusal = await self.gateway.admission(scope, body)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        version = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-protocol-version"), None)
        handshake = version is None or version in HANDSHAKE_PROTOCOL_VERSIONS
        manager = self.sse if handshake or _may_stream(body) else self.plain
        await manager.handle_request(scope, replay, send)

    async def _body(self, scope: Any, receive: Any, send: Any) -> bytes | None:
        """The request's body, or None once answered (413 for a body over the limit, or gone)."""
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": f"Request body larger than {self.limit} bytes."}},
                    status_code=413)(scope, receive, send)
                return None
        return body


LOG_LEVEL_KEY = LOG_LEVEL_META_KEY.encode()  # a 2026-07-28 request asking for log messages: they stream


def _may_stream(body: bytes) -> bool:
    if b"\\u" not in body:  # no JSON escapes: the names below can only appear as written
        return b"progressToken" in body or b"subscriptions/listen" in body or LOG_LEVEL_KEY in body
    try:
        message = json.loads(body)
    except ValueError:
        return True  # let the SSE path answer with the SDK's own error
    if not isinstance(message, dict) or message.get("method") == "subscriptions/listen":
        return True
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and ("progressToken" in meta or LOG_LEVEL_META_KEY in meta)


def build_app() -> Starlette:
    gateway = Gateway()
    server = GatewayServer(
        "airlock-gateway", version="1.0.0", title="Airlock MCP gateway",
        instructions="Tools of one Airlock agent. Every call is checked by Airlock's policy; some wait for a "
                     "person's approval in the Airlock inbox, and denied calls say why.",
        on_list_tools=gateway.list_tools, on_call_tool=gateway.call_tool,
        on_list_resources=gateway.list_resources, on_list_resource_templates=gateway.list_resource_templates,
        on_read_resource=gateway.read_resource, on_list_prompts=gateway.list_prompts,
        on_get_prompt=gateway.get_prompt, on_subscriptions_listen=gateway.listen_handler(),
        # Relayed to the server behind (apps/gateway/relay.py), so declared: logging, completions and, in the
        # handshake era, resources.subscribe.
        on_completion=gateway.complete, on_set_logging_level=gateway.set_logging_level,
        on_subscribe_resource=gateway.subscribe_resource, on_unsubscribe_resource=gateway.unsubscribe_resource,
        # Arguments are checked per caller in call_tool; the SDK would otherwise run tools/list on
        # every 2026-era call to look for Mcp-Param-* headers.
        get_tool_input_schema=lambda name: None)
    server.middleware = []  # no OpenTelemetry span per message on the hot path
    limit = int(getattr(settings, "AIRLOCK_GATEWAY_MAX_BODY_BYTES", 1024 * 1024))
    security = transport_security()
    manager = StreamableHTTPSessionManager(app=server, security_settings=security, max_request_body_size=limit)
    json_manager = StreamableHTTPSessionManager(app=server, security_settings=security, max_request_body_size=limit,
                                                json_response=True, stateless=True)
    endpoint = AuthenticationMiddleware(
        AuthContextMiddleware(RequireAuthMiddleware(EraRouter(manager, json_manager, limit, gateway), [],
                                                    resource_metadata_url=AnyHttpUrl(metadata_url()))),
        backend=gateway.auth, on_error=auth_error_response)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "open_sessions": len(gateway._sessions),
                             "listening": gateway._listening, "keys_heard": gateway.heard_keys.listening,
                             "ledger_idle": gateway.writer.idle})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), json_manager.run():
            try:
                async with anyio.create_task_group() as tasks:
                    await gateway.start()
                    tasks.start_soon(gateway.maintain)
                    tasks.start_soon(gateway.listen_for_changes)
                    tasks.start_soon(gateway.refresh_changed)
                    try:
                        yield
                    finally:
                        tasks.cancel_scope.cancel()
            finally:
                # Shielded: in the cancelled task group the stop returned at its first await, and the
                # ledger records still queued were lost with the process.
                with anyio.CancelScope(shield=True):
                    await gateway.stop()

    routes = [Route("/mcp", endpoint=endpoint), Route("/healthz", healthz),
              Route(METADATA_PATH, protected_resource_metadata),
              Route(METADATA_PATH + urlsplit(resource_url()).path, protected_resource_metadata)]
    app = GatewayApp(routes=routes, lifespan=lifespan)
    app.mcp_endpoint = endpoint
    app.state.gateway = gateway
    return app


class GatewayApp(Starlette):
    """Sends `/mcp` requests straight to the endpoint (auth, then the era router), past Starlette's
    router and exception middlewares: per call they cost more than the rest of the routing, and an
    exception escaping the endpoint still becomes a 500 (uvicorn's). Everything else as Starlette."""

    mcp_endpoint: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp" and self.mcp_endpoint is not None:
            scope["app"] = self
            await self.mcp_endpoint(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

