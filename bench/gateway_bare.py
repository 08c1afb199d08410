"""The lowest floor of the gateway metric: `bench/gateway_floor.py` with `tools/call` answered by hand.

A 2026-07-28 `tools/call` (a stateless JSON request) is read as raw ASGI, forwarded over the same
pooled stdio session, and answered as one JSON body: no SDK server parts (no session manager,
transport, dispatcher or result shaping), no Airlock work. Everything else (the client's first
requests, `tools/list`) goes to the SDK proxy as in the floor. Not a gateway: it answers nothing but
the one tool, unchecked. What uvicorn, one HTTP request and the pooled downstream call cost on this
machine before any MCP server code runs; bench/gateway.py times it beside the others.

    uvicorn bench.gateway_bare:app
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from bench.gateway_floor import FloorApp, call_tool, lifespan


async def _body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


class BareApp(FloorApp):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or ())
        if scope["type"] != "http" or scope["path"] != "/mcp" or scope["method"] != "POST" or \
                headers.get(b"mcp-protocol-version", b"").decode("latin-1") not in MODERN_PROTOCOL_VERSIONS:
            await super().__call__(scope, receive, send)
            return
        body = await _body(receive)
        request = json.loads(body)
        if request.get("method") != "tools/call":
            replayed = False

            async def replay() -> dict:
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await super().__call__(scope, replay, send)
            return
        params = request["params"]
        wire = await call_tool(None, SimpleNamespace(name=params["name"], arguments=params.get("arguments")))
        out = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": wire}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})


app = BareApp(routes=[], lifespan=lifespan)
