"""Resource subscriptions through the gateway.

A host subscribes to a resource its agent may read, on a server that declares `resources.subscribe`; the server
behind it is subscribed once per resource however many hosts asked (the pool keeps that subscription, and makes
it again on a new session: `downstream.LoopPool.asubscribe`), and a change the server reports reaches every
host that holds a subscription while its agent may still read the resource. A handshake-era host session holds
one by `resources/subscribe` until `resources/unsubscribe` or until it has been idle for the session timeout; a
2026-07-28 host by a `subscriptions/listen` stream, for as long as the stream is open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
from mcp import MCPError
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus

from apps.audit.org_secrets import redact_outside
from apps.gateway.catalog import AgentView
from apps.gateway.downstream import LoopPool
from apps.registry.connection import ServerSpec
from apps.registry.pool import ToolCallFailed

logger = logging.getLogger(__name__)

Holder = tuple[str, str, str]  # ("session", agent id, host session id) or ("listen", agent id, stream id)


class Hosts(Protocol):
    """What the subscriptions ask of the gateway (`server.Gateway`)."""

    async def view(self, agent_id: str) -> AgentView: ...

    async def resource_server(self, view: AgentView, uri: str) -> ServerSpec:
        """The spec of the server whose resource the agent may read at `uri`; MCPError "not found" otherwise."""
        ...

    def handshake_session(self, agent_id: str, session_id: str) -> Any | None:
        """The open handshake-era host session (its `ServerSession`), or None."""
        ...

    def bus(self, agent_id: str) -> SubscriptionBus | None:
        """Where the agent's 2026-07-28 listen streams take their events from, or None."""
        ...


class ResourceSubscriptions:
    def __init__(self, hosts: Hosts, pool: LoopPool, db: Callable[..., Awaitable[Any]]) -> None:
        self.hosts, self.pool, self.db = hosts, pool, db
        self._holders: dict[tuple[str, str], set[Holder]] = {}  # (server id, uri) -> who holds a subscription
        self._tasks: set[asyncio.Task] = set()
        pool.on_resource_updated = self.updated

    async def subscribe(self, view: AgentView, uri: str, holder: Holder) -> None:
        """Raises MCPError: not a resource the agent may read, no subscriptions there, or the server refused."""
        spec = await self._subscribable(view, uri)
        if self._add((spec.id, uri), holder):
            try:
                await self.pool.asubscribe(spec, uri)
            except ToolCallFailed as exc:
                self._remove((spec.id, uri), holder)
                raise MCPError(-32603, await self.db(redact_outside, str(exc), org_id=spec.org_id)) from None

    async def unsubscribe(self, view: AgentView, uri: str, holder: Holder) -> None:
        server_id = view.may_read(uri)
        spec = view.specs.get(server_id or "")
        if spec is not None:
            await self._unsubscribe(spec, uri, holder)

    @asynccontextmanager
    async def held(self, view: AgentView, uris: list[str], holder: Holder) -> AsyncIterator[None]:
        """Subscriptions to `uris` for as long as the block runs (a listen stream). Raises as `subscribe`."""
        specs = {uri: await self._subscribable(view, uri) for uri in uris}
        try:
            for uri, spec in specs.items():
                if self._add((spec.id, uri), holder):
                    try:
                        await self.pool.asubscribe(spec, uri)
                    except ToolCallFailed as exc:
                        raise MCPError(-32603, await self.db(redact_outside, str(exc), org_id=spec.org_id)) from None
            yield
        finally:
            with anyio.CancelScope(shield=True):
                for uri, spec in specs.items():
                    await self._unsubscribe(spec, uri, holder)

    async def end(self, holder: Holder, view: AgentView | None) -> None:
        """Ends every subscription `holder` holds (its host session went idle)."""
        for server_id, uri in [key for key, holders in self._holders.items() if holder in holders]:
            spec = view.specs.get(server_id) if view is not None else None
            if spec is not None:
                await self._unsubscribe(spec, uri, holder)
            else:
                self._remove((server_id, uri), holder)

    def updated(self, server_id: str, uri: str) -> None:
        """A server says a resource changed (called on the gateway's loop by the pool's session)."""
        holders = list(self._holders.get((server_id, uri), ()))
        if holders:
            task = asyncio.get_running_loop().create_task(self._tell(server_id, uri, holders))
            self._tasks.add(task)  # a reference, or the task may be collected before it runs
            task.add_done_callback(self._tasks.discard)

    async def _tell(self, server_id: str, uri: str, holders: list[Holder]) -> None:
        for agent_id in sorted({agent_id for kind, agent_id, _ in holders if kind == "listen"}):
            bus = self.hosts.bus(agent_id)
            if bus is not None and await self._still_readable(agent_id, server_id, uri):
                await bus.publish(ResourceUpdated(uri=uri))
        for kind, agent_id, session_id in holders:
            session = self.hosts.handshake_session(agent_id, session_id) if kind == "session" else None
            if session is None or not await self._still_readable(agent_id, server_id, uri):
                continue
            try:
                with anyio.fail_after(5):
                    await session.send_resource_updated(uri)
            except Exception:
                logger.debug("gateway: a resource update did not reach its host", exc_info=True)

    async def _still_readable(self, agent_id: str, server_id: str, uri: str) -> bool:
        """The agent may still read it: grants change while a subscription lasts."""
        return (await self.hosts.view(agent_id)).may_read(uri) == server_id

    async def _subscribable(self, view: AgentView, uri: str) -> ServerSpec:
        spec = await self.hosts.resource_server(view, uri)
        relay = view.servers[spec.id]
        if not relay.subscribe:
            raise MCPError(-32602, f"The server behind {uri} does not offer subscriptions ({relay.name} does not "
                                   "declare resources.subscribe).")
        return spec

    async def _unsubscribe(self, spec: ServerSpec, uri: str, holder: Holder) -> None:
        if self._remove((spec.id, uri), holder):
            try:
                await self.pool.aunsubscribe(spec, uri)
            except Exception:
                logger.info("gateway: ending the subscription to %s failed", uri, exc_info=True)

    def _add(self, key: tuple[str, str], holder: Holder) -> bool:
        """True when it is the resource's first holder (the server must be asked)."""
        holders = self._holders.setdefault(key, set())
        first = not holders
        holders.add(holder)
        return first

    def _remove(self, key: tuple[str, str], holder: Holder) -> bool:
        """True when it was the resource's last holder (the server can be told to stop)."""
        holders = self._holders.get(key)
        if not holders or holder not in holders:
            return False
        holders.discard(holder)
        if holders:
            return False
        self._holders.pop(key, None)
        return True
