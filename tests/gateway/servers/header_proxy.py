"""A reverse proxy that adds one request header, for MCP clients that cannot send one (the conformance suite
sends no Authorization header). Streams responses (SSE included) and passes Host and Origin through, so the
target still judges them itself (its DNS-rebinding check).

    PROXY_TARGET=http://127.0.0.1:8001 PROXY_HEADER="Authorization: Bearer ..." \\
        python -m tests.gateway.servers.header_proxy PORT
"""

from __future__ import annotations

import os
import sys

import httpx2
import uvicorn
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

TARGET = os.environ.get("PROXY_TARGET", "").rstrip("/")
NAME, _, VALUE = os.environ.get("PROXY_HEADER", "").partition(":")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
client = httpx2.AsyncClient(timeout=httpx2.Timeout(None))


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    request = Request(scope, receive)
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
    headers.append((NAME.strip(), VALUE.strip()))
    url = TARGET + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    upstream = await client.send(client.build_request(request.method, url, headers=headers,
                                                      content=await request.body()), stream=True)
    response = StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                 headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
                                 background=BackgroundTask(upstream.aclose))
    await response(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
