"""The gateway's downstream sessions: the registry's connection pool, run on the gateway's own loop.

`apps.registry.pool.Pool` keeps one supervised session per server (its own task; a dead server
is dropped and reconnected on the next call, one bad server never takes the others down).
Workers use the module's pool from sync code, on a loop in a thread of its own. The gateway is
async already: its pool runs the same sessions on the gateway's event loop, so a forwarded call
does not hop to another thread and back (two thread wake-ups and GIL hand-offs per call).

What a server sends during a call that must reach the host that made it (log messages, elicitation and
sampling requests) cannot be told apart on a shared session, so such a call gets a session of its own
(`arelayed_call`). Progress can: the SDK gives each request its own progress token. Resource
subscriptions live on the shared session (`asubscribe`): one per server and URI whoever asked for it,
made again on a new session (`keep_subscriptions`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from apps.registry.connection import ServerSpec
from apps.registry.pool import Pool, ToolCallFailed, ToolCallResult, ToolCallTimeout, _Session

logger = logging.getLogger(__name__)


class LoopPool(Pool):
    """A pool whose sessions live on the event loop that calls it (one loop: the gateway's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._subscriptions: dict[str, tuple[ServerSpec, set[str]]] = {}  # server id -> (spec, uris)
        self._subscribed_on: dict[str, _Session] = {}  # server id -> the session its subscriptions are on
        self._listens: dict[str, asyncio.Task] = {}  # server id -> a 2026-07-28 server's listen stream

    async def acall_tool(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                         timeout: float, *, progress: Any = None) -> ToolCallResult:
        try:
            # A deadline on this task, not wait_for: that runs the call in a task of its own (a task more to
            # create and switch to on every call).
            async with asyncio.timeout(spec.timeout_s + timeout + 15):
                return await self._call(spec, tool_name, arguments, timeout, progress)
        except TimeoutError:
            raise ToolCallTimeout(f"No answer within {timeout:g} s.") from None

    async def arelayed_call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any], timeout: float, *,
                            callbacks: dict[str, Any], progress: Any = None, log_level: str | None = None,
                            logging_callback: Any = None) -> ToolCallResult:
        """The call on a session of its own (a connect more: 0.1 s over HTTP, 1-3 s for a Python stdio
        server), whose elicitation and sampling requests `callbacks` answer and whose log messages at
        `log_level` and above go to `logging_callback`."""
        try:
            async with asyncio.timeout(spec.timeout_s + timeout + 15):
                return await self._call_on_own_session(spec, tool_name, arguments, timeout, callbacks,
                                                       progress=progress, log_level=log_level,
                                                       logging_callback=logging_callback)
        except TimeoutError:
            raise ToolCallTimeout(f"No answer within {timeout:g} s.") from None

    async def aread_resource(self, spec: ServerSpec, uri: str, timeout: float) -> dict[str, Any]:
        return await self._request(spec, "read_resource", timeout, uri)

    async def aget_prompt(self, spec: ServerSpec, name: str, arguments: dict[str, str] | None,
                          timeout: float) -> dict[str, Any]:
        return await self._request(spec, "get_prompt", timeout, name, arguments)

    async def acomplete(self, spec: ServerSpec, ref: Any, argument: dict[str, str],
                        context_arguments: dict[str, str] | None, timeout: float) -> dict[str, Any]:
        return await self._request(spec, "complete", timeout, ref, argument, context_arguments)

    # --- resource subscriptions ------------------------------------------------------------------

    async def asubscribe(self, spec: ServerSpec, uri: str) -> None:
        """Subscribes the server's shared session to `uri` (once, however many hosts asked for it)."""
        _, uris = self._subscriptions.get(spec.id, (spec, set()))
        self._subscriptions[spec.id] = (spec, uris | {uri})
        if uri in uris and self._subscribed_on.get(spec.id) is self._sessions.get(spec.id):
            return
        session = await self._session(spec)
        if self._subscribed_on.get(spec.id) is not session:
            await self._resubscribe(spec.id, session)
        else:
            await self._subscribe_uris(session, {uri})

    async def aunsubscribe(self, spec: ServerSpec, uri: str) -> None:
        """Ends the shared session's subscription to `uri` (when no host wants it any more)."""
        spec, uris = self._subscriptions.get(spec.id, (spec, set()))
        if uri not in uris:
            return
        uris = uris - {uri}
        if uris:
            self._subscriptions[spec.id] = (spec, uris)
        else:
            self._subscriptions.pop(spec.id, None)
        session = self._sessions.get(spec.id)
        if session is None or session.dead or self._subscribed_on.get(spec.id) is not session:
            return
        if session.client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            self._listen(spec.id, session, uris)
            return
        try:
            await session.client.unsubscribe_resource(uri)
        except Exception as exc:  # the server forgets it with the session anyway
            logger.info("unsubscribing %s from %s failed: %s", spec.name, uri, exc)

    async def keep_subscriptions(self) -> None:
        """Subscribes again on a server's new session (the old one died or was restarted)."""
        for server_id, (spec, _) in list(self._subscriptions.items()):
            session = self._sessions.get(server_id)
            if session is not None and not session.dead and self._subscribed_on.get(server_id) is session:
                continue
            try:
                await self._resubscribe(server_id, await self._session(spec))
            except ToolCallFailed as exc:
                logger.info("resource subscriptions to %s wait for the server: %s", spec.name, exc)

    async def _resubscribe(self, server_id: str, session: _Session) -> None:
        self._subscribed_on[server_id] = session
        await self._subscribe_uris(session, self._subscriptions.get(server_id, (None, set()))[1])

    async def _subscribe_uris(self, session: _Session, uris: set[str]) -> None:
        if session.client.protocol_version in MODERN_PROTOCOL_VERSIONS:  # no resources/subscribe: a listen stream
            self._listen(session.spec.id, session, self._subscriptions.get(session.spec.id, (None, set()))[1])
            return
        for uri in sorted(uris):
            try:
                await session.client.subscribe_resource(uri)
            except Exception as exc:
                raise ToolCallFailed(f"{session.spec.name} refused the subscription to {uri}: {exc}") from None

    def _listen(self, server_id: str, session: _Session, uris: set[str]) -> None:
        """(Re)opens a 2026-07-28 server's listen stream for exactly `uris`."""
        old = self._listens.pop(server_id, None)
        if old is not None:
            old.cancel()
        if uris:
            self._listens[server_id] = asyncio.get_running_loop().create_task(
                self._listen_stream(server_id, session, sorted(uris)), name=f"listen:{session.spec.name}")

    async def _listen_stream(self, server_id: str, session: _Session, uris: list[str]) -> None:
        """Holds the stream open: its events reach the session's message handler too (the SDK tees them), which
        tells `on_resource_updated`."""
        try:
            async with session.client.listen(resource_subscriptions=uris) as subscription:
                async for _event in subscription:
                    pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next keep_subscriptions opens it again on a new session
            logger.info("resource subscriptions of %s ended: %s", session.spec.name, exc)
            if self._subscribed_on.get(server_id) is session:
                self._subscribed_on.pop(server_id, None)

    async def aclose_all(self) -> None:
        for task in self._listens.values():
            task.cancel()
        self._listens.clear()
        for server_id in list(self._sessions):
            await self._drop(server_id)

    # The sync entry points would start a second loop in a thread: not for this pool.
    def _run_coroutine(self, coro: Any, timeout: float) -> Any:
        coro.close()
        raise RuntimeError("LoopPool is async only: await its a* methods on the gateway's loop.")
