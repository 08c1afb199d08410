"""The gateway's downstream sessions: the registry's connection pool, run on the gateway's own loop.

`apps.registry.pool.Pool` keeps one supervised session per server (its own task; a dead server
is dropped and reconnected on the next call, one bad server never takes the others down).
Workers use the module's pool from sync code, on a loop in a thread of its own. The gateway is
async already: its pool runs the same sessions on the gateway's event loop, so a forwarded call
does not hop to another thread and back (two thread wake-ups and GIL hand-offs per call).

`tools/call` to a stdio server takes a shorter path than the SDK client's `call_tool`: the request
goes to the session's JSON-RPC dispatcher as a plain dict, stamped by the session as any request,
and the answer is validated once as a `CallToolResult` (plus the tool's output schema, as the SDK
does), then passed on in its wire form. The SDK's way built and dumped a request model, validated
the result three times over and dumped every content item again: ~10% of the gateway's CPU per
call. HTTP servers (Mcp-Name and Mcp-Param headers) and anything unexpected keep the SDK's path.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import mcp.types as types
from mcp import MCPError
from pydantic import ValidationError

from apps.registry.connection import ServerSpec, describe_error
from apps.registry.pool import Pool, ToolCallFailed, ToolCallResult, ToolCallTimeout

logger = logging.getLogger(__name__)


class LoopPool(Pool):
    """A pool whose sessions live on the event loop that calls it (one loop: the gateway's)."""

    async def acall_tool(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                         timeout: float) -> ToolCallResult:
        try:
            return await asyncio.wait_for(self._call(spec, tool_name, arguments, timeout),
                                          spec.timeout_s + timeout + 15)
        except TimeoutError:
            raise ToolCallTimeout(f"No answer within {timeout:g} s.") from None

    async def _call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                    timeout: float) -> ToolCallResult:
        if spec.transport != "stdio":
            return await super()._call(spec, tool_name, arguments, timeout)
        session = await self._session(spec)
        client_session = session.client.session
        stamp, dispatcher = getattr(client_session, "_stamp", None), getattr(client_session, "_dispatcher", None)
        if stamp is None or dispatcher is None:  # another SDK version: its own path
            return await super()._call(spec, tool_name, arguments, timeout)
        data: dict[str, Any] = {"method": "tools/call", "params": {"name": tool_name, "arguments": arguments}}
        opts: dict[str, Any] = {"timeout": timeout}
        stamp(data, opts)
        try:
            raw = await dispatcher.send_raw_request("tools/call", data["params"], opts)
        except MCPError as exc:
            if exc.code == -32001:
                raise ToolCallTimeout(f"No answer from {spec.name}.{tool_name} within {timeout:g} s.") from None
            if exc.code == -32000:
                await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        except Exception as exc:
            await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        try:
            result = types.CallToolResult.model_validate(raw, by_name=False)
            if not result.is_error:
                await client_session.validate_tool_result(tool_name, result)
        except (ValidationError, RuntimeError) as exc:
            raise ToolCallFailed(f"{spec.name}.{tool_name} answered with an invalid result: "
                                 f"{str(exc).splitlines()[0][:300]}") from None
        return ToolCallResult(is_error=bool(result.is_error), content=list(raw.get("content") or []),
                              structured_content=result.structured_content)

    async def aread_resource(self, spec: ServerSpec, uri: str, timeout: float) -> dict[str, Any]:
        return await self._request(spec, "read_resource", timeout, uri)

    async def aget_prompt(self, spec: ServerSpec, name: str, arguments: dict[str, str] | None,
                          timeout: float) -> dict[str, Any]:
        return await self._request(spec, "get_prompt", timeout, name, arguments)

    async def aclose_all(self) -> None:
        for server_id in list(self._sessions):
            await self._drop(server_id)

    # The sync entry points would start a second loop in a thread: not for this pool.
    def _run_coroutine(self, coro: Any, timeout: float) -> Any:
        coro.close()
        raise RuntimeError("LoopPool is async only: await its a* methods on the gateway's loop.")
