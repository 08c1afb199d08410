"""The gateway's downstream sessions: the registry's connection pool, run on the gateway's own loop.

`apps.registry.pool.Pool` keeps one supervised session per server (its own task; a dead server
is dropped and reconnected on the next call, one bad server never takes the others down).
Workers use the module's pool from sync code, on a loop in a thread of its own. The gateway is
async already: its pool runs the same sessions on the gateway's event loop, so a forwarded call
does not hop to another thread and back (two thread wake-ups and GIL hand-offs per call).
"""

from __future__ import annotations

import asyncio
from typing import Any

from apps.registry.connection import ServerSpec
from apps.registry.pool import Pool, ToolCallResult, ToolCallTimeout


class LoopPool(Pool):
    """A pool whose sessions live on the event loop that calls it (one loop: the gateway's)."""

    async def acall_tool(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                         timeout: float) -> ToolCallResult:
        try:
            # A deadline on this task, not wait_for: that runs the call in a task of its own (a task more to
            # create and switch to on every call).
            async with asyncio.timeout(spec.timeout_s + timeout + 15):
                return await self._call(spec, tool_name, arguments, timeout)
        except TimeoutError:
            raise ToolCallTimeout(f"No answer within {timeout:g} s.") from None

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
