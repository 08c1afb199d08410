"""The floor of the gateway metric: an MCP proxy made of the same SDK parts as the gateway and nothing else.

Streamable HTTP in (the SDK's stateless JSON session manager, what the gateway's era router uses for a
2026-07-28 `tools/call`), the registry's connection pool out (the gateway's `LoopPool`, the SDK's stdio
client), served by uvicorn like the gateway. No key, no policy, no ledger, no audit, no scan: what the SDK
and one HTTP hop cost before Airlock adds anything. bench/gateway.py times it beside the gateway and the
direct call.

    uvicorn bench.gateway_floor:app
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

import mcp.types as types  # noqa: E402
from mcp.server.lowlevel.server import Server  # noqa: E402
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # noqa: E402
from mcp.types.version import MODERN_PROTOCOL_VERSIONS  # noqa: E402
from starlette.applications import Starlette  # noqa: E402

from apps.gateway.downstream import LoopPool  # noqa: E402
from apps.registry.connection import ServerSpec, connect  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOL = "bench.lookup"
SPEC = ServerSpec(id="floor", org_id="floor", name="bench", transport="stdio", trust_tier="internal",
                  command=sys.executable, args=("-m", "bench.lookup_server"), cwd=str(ROOT), env={})
pool = LoopPool(on_list_changed=lambda server_id: None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> dict[str, Any]:
    result = await pool.acall_tool(SPEC, "lookup", dict(params.arguments or {}), SPEC.timeout_s)
    wire: dict[str, Any] = {"content": result.content, "isError": result.is_error, "resultType": "complete"}
    if result.structured_content is not None:
        wire["structuredContent"] = result.structured_content
    return wire


LISTED: list[types.Tool] = []  # the downstream's tool under the gateway's qualified name, read at start


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    # As the gateway does: the tool with its output schema, which the client checks every result against.
    return types.ListToolsResult(tools=LISTED)


server = Server("gateway-floor", on_call_tool=call_tool, on_list_tools=list_tools,
                get_tool_input_schema=lambda name: None)
server.middleware = []  # as the gateway: no OpenTelemetry span per message
manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
handshake = StreamableHTTPSessionManager(app=server)  # what a client tries before the 2026-07-28 era


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with connect(SPEC) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "lookup")
    LISTED.append(tool.model_copy(update={"name": TOOL}))
    async with manager.run(), handshake.run():
        yield
    await pool.aclose_all()


class FloorApp(Starlette):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode("latin-1")
            chosen = manager if version in MODERN_PROTOCOL_VERSIONS else handshake
            await chosen.handle_request(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


app = FloorApp(routes=[], lifespan=lifespan)
