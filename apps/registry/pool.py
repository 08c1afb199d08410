"""Live MCP sessions inside a worker process, one per server, for tool calls.

Connecting costs ~1 s for a Python stdio server, a call ~2 ms: so each server keeps one open
session in a background event loop (one thread per process). A session whose server died is
dropped and the next call starts a new one; a changed registration (command, env, URL, ...)
restarts it. Each session lives in its own task: one bad server never takes the others down.
While a session is open, the server's list-changed notices enqueue a re-sync.

A failed call is never retried here: the request may have reached the server, and only the
run engine's ledger may decide what a second attempt means.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import anyio
from mcp import MCPError
from mcp.types import (
    PromptListChangedNotification,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    ToolListChangedNotification,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from apps.registry import oauth, selectors
from apps.registry.connection import ServerSpec, connect, describe_error, spec_for, stderr_tail
from apps.registry.host import CallHost, declining, hosted
from apps.registry.models import McpServer, Transport

logger = logging.getLogger(__name__)
LIST_CHANGED = (ToolListChangedNotification, PromptListChangedNotification, ResourceListChangedNotification)
STREAM_WAIT_S = 5.0  # how long a call on its own session waits for the server's stream to open


class ToolCallFailed(Exception):
    """The call did not produce a result (server down, timeout, crash); the message is readable."""


class ToolCallTimeout(ToolCallFailed):
    """No answer within the timeout; the server was asked to cancel the call."""


@dataclass
class ToolCallResult:
    is_error: bool
    content: list[dict[str, Any]]
    structured_content: dict[str, Any] | None

    @property
    def text(self) -> str:
        return "\n".join(c.get("text", "") for c in self.content if c.get("type") == "text")

    def as_dict(self) -> dict[str, Any]:
        return {"is_error": self.is_error, "content": self.content, "structured_content": self.structured_content}


class PendingCall:
    """A call on its way (`Pool.start_call`): `result()` waits for its outcome, or raises as `call_tool` does."""

    def __init__(self, future: Future, timeout: float) -> None:
        self.future, self.timeout = future, timeout

    def result(self) -> Any:
        try:
            return self.future.result(self.timeout)
        except FutureTimeout:
            self.future.cancel()
            raise ToolCallTimeout(f"No answer within {self.timeout:g} s.") from None


def _enqueue_sync(server_id: str) -> None:
    from apps.registry import tasks  # tasks -> services -> connection/pool: a top-level import would be a cycle

    tasks.sync_server.delay(server_id)


class _Session:
    """One server's open client, kept alive by its own task until closed or dead."""

    def __init__(self, spec: ServerSpec, on_list_changed: Callable[[str], None],
                 on_resource_updated: Callable[[str, str], None] | None = None) -> None:
        self.spec, self.on_list_changed, self.on_resource_updated = spec, on_list_changed, on_resource_updated
        self.client: Any = None
        self.error = ""
        self.dead = False
        self.ready, self.stop = asyncio.Event(), asyncio.Event()
        self.errlog = tempfile.TemporaryFile("w+")  # noqa: SIM115 (lives as long as the session)
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{spec.name}")

    async def _run(self) -> None:
        try:
            async with connect(self.spec, errlog=self.errlog, message_handler=self._on_message,
                               **declining(self.spec.name)) as client:
                self.client = client
                self.ready.set()
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and client.server_capabilities.tools \
                        and client.server_capabilities.tools.list_changed:
                    listener = asyncio.create_task(self._listen(client))
                    await self.stop.wait()
                    listener.cancel()
                else:
                    await self.stop.wait()
        except Exception as exc:
            self.error = describe_error(exc, spec=self.spec, stderr=stderr_tail(self.errlog))
            logger.warning("MCP session for server %s ended: %s", self.spec.id, self.error.splitlines()[0])
        finally:
            self.dead = True
            self.ready.set()
            self.errlog.close()

    async def _listen(self, client: Any) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._list_changed()
        except Exception as exc:  # a server without working subscriptions still serves calls
            logger.info("list-changed subscription for server %s ended: %s", self.spec.id, exc)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, LIST_CHANGED):
            self._list_changed()
        elif isinstance(message, ResourceUpdatedNotification) and self.on_resource_updated is not None:
            self.on_resource_updated(self.spec.id, str(message.params.uri))

    def _list_changed(self) -> None:
        asyncio.get_running_loop().run_in_executor(None, self.on_list_changed, self.spec.id)

    async def close(self) -> None:
        self.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            self.task.cancel()


class Pool:
    # Who hears a pooled session's `notifications/resources/updated` (server id, uri): the gateway, which
    # subscribes on behalf of its hosts. Nobody else subscribes.
    on_resource_updated: Callable[[str, str], None] | None = None

    def __init__(self, on_list_changed: Callable[[str], None] = _enqueue_sync) -> None:
        self.on_list_changed = on_list_changed
        self._sessions: dict[str, _Session] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._start_lock = threading.Lock()

    def _submit(self, coro: Any) -> Future:
        with self._start_lock:
            if self._loop is None or not self._loop.is_running():
                self._loop = asyncio.new_event_loop()
                started = threading.Event()
                self._loop.call_soon(started.set)
                threading.Thread(target=self._loop.run_forever, name="mcp-pool", daemon=True).start()
                started.wait(5)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _run_coroutine(self, coro: Any, timeout: float) -> Any:
        return PendingCall(self._submit(coro), timeout).result()

    def call_tool(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any], timeout: float) -> ToolCallResult:
        return self.start_call(spec, tool_name, arguments, timeout).result()

    def start_call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any], timeout: float) -> PendingCall:
        """`call_tool` in two halves: the request leaves now, on the pool's loop, and `result()` waits for it."""
        return PendingCall(self._submit(self._call(spec, tool_name, arguments, timeout)), spec.timeout_s + timeout + 15)

    async def acall_tool(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                         timeout: float) -> ToolCallResult:
        """`call_tool` for async callers on another event loop (the gateway): no thread blocks on it."""
        if self._loop is None or not self._loop.is_running():  # start the pool's loop on first use
            await asyncio.to_thread(self._run_coroutine, asyncio.sleep(0), 5)
        future = asyncio.run_coroutine_threadsafe(self._call(spec, tool_name, arguments, timeout), self._loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), spec.timeout_s + timeout + 15)
        except TimeoutError:
            future.cancel()
            raise ToolCallTimeout(f"No answer within {timeout:g} s.") from None

    def start_hosted_call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any], timeout: float,
                          host: CallHost, *, allow_elicitation: bool, allow_sampling: bool) -> PendingCall:
        """A call on a session of its own, whose elicitation and sampling requests `host` answers (a pooled
        session is shared by every run in the process: a request on it could not be told apart by run).
        Costs a connect (1-3 s for a Python stdio server): used only for servers allowed to ask."""
        return PendingCall(self._submit(self._hosted_call(spec, tool_name, arguments, timeout, host,
                                                          allow_elicitation, allow_sampling)),
                           spec.timeout_s + timeout + 15)

    async def _hosted_call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any], timeout: float,
                           host: CallHost, allow_elicitation: bool, allow_sampling: bool) -> ToolCallResult:
        deadline = time.monotonic() + timeout
        callbacks = hosted(spec.name, host, allow_elicitation=allow_elicitation, allow_sampling=allow_sampling,
                           deadline=deadline)
        return await self._call_on_own_session(spec, tool_name, arguments, timeout, callbacks)

    async def _call_on_own_session(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                                   timeout: float, callbacks: dict[str, Any], *, progress: Any = None,
                                   log_level: str | None = None, logging_callback: Any = None) -> ToolCallResult:
        """One call on a session opened for it, so that what the server sends during the call belongs to it:
        `callbacks` answer its elicitation and sampling requests, `progress` hears its progress, and with
        `log_level` its log messages at that level and above go to `logging_callback`."""
        deadline = time.monotonic() + timeout
        failure: MCPError | None = None
        stream = anyio.Event()
        with tempfile.TemporaryFile("w+") as errlog:
            try:
                async with connect(spec, errlog=errlog, log_level=log_level, logging_callback=logging_callback,
                                   stream_opened=stream, **callbacks) as client:
                    try:  # caught in here: leaving the client's task group would wrap it in a group
                        if spec.transport == Transport.HTTP and client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                            # A server may send its requests on the session's own stream rather than the call's:
                            # sent before that stream is open, they would be lost and the call would wait for them.
                            with anyio.move_on_after(STREAM_WAIT_S):
                                await stream.wait()
                        if log_level and client.server_capabilities.logging is not None and \
                                client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                            await client.set_logging_level(log_level)
                        result = await client.call_tool(tool_name, arguments, progress_callback=progress,
                                                        read_timeout_seconds=max(deadline - time.monotonic(), 1))
                    except MCPError as exc:
                        failure = exc
            except Exception as exc:
                raise ToolCallFailed(describe_error(exc, spec=spec, stderr=stderr_tail(errlog))) from None
            if failure is not None:
                if failure.code == -32001:
                    raise ToolCallTimeout(f"No answer from {spec.name}.{tool_name} within {timeout:g} s.")
                raise ToolCallFailed(describe_error(failure, spec=spec, stderr=stderr_tail(errlog)))
        return ToolCallResult(
            is_error=bool(result.is_error),
            content=[c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content],
            structured_content=result.structured_content,
        )

    async def _session(self, spec: ServerSpec) -> _Session:
        session = self._sessions.get(spec.id)
        if session is not None and (session.dead or session.spec.fingerprint != spec.fingerprint):
            await session.close()
            session = None
        if session is None:
            session = self._sessions[spec.id] = _Session(spec, self.on_list_changed, self.on_resource_updated)
        elif session.ready.is_set():  # open (the usual case): no task to wait on an event already set
            return session
        try:
            await asyncio.wait_for(asyncio.shield(session.ready.wait()), timeout=spec.timeout_s)
        except TimeoutError:
            self._sessions.pop(spec.id, None)
            await session.close()
            raise ToolCallTimeout(f"The server did not start within {spec.timeout_s:g} s.") from None
        if session.dead:
            self._sessions.pop(spec.id, None)
            raise ToolCallFailed(session.error or "The server could not be started.")
        return session

    async def _call(self, spec: ServerSpec, tool_name: str, arguments: dict[str, Any],
                    timeout: float, progress: Any = None) -> ToolCallResult:
        session = await self._session(spec)
        try:
            result = await session.client.call_tool(tool_name, arguments, read_timeout_seconds=timeout,
                                                    progress_callback=progress)
        except MCPError as exc:
            if exc.code == -32001:
                raise ToolCallTimeout(f"No answer from {spec.name}.{tool_name} within {timeout:g} s.") from None
            if exc.code == -32000:
                await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        except Exception as exc:
            await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        return ToolCallResult(
            is_error=bool(result.is_error),
            content=[c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content],
            structured_content=result.structured_content,
        )

    def read_resource(self, spec: ServerSpec, uri: str, timeout: float) -> dict[str, Any]:
        """`resources/read` on the server's pooled session (wire JSON of the result)."""
        return self._run_coroutine(self._request(spec, "read_resource", timeout, uri), spec.timeout_s + timeout + 15)

    def get_prompt(self, spec: ServerSpec, name: str, arguments: dict[str, str] | None, timeout: float) -> dict:
        """`prompts/get` on the server's pooled session (wire JSON of the result)."""
        return self._run_coroutine(self._request(spec, "get_prompt", timeout, name, arguments),
                                   spec.timeout_s + timeout + 15)

    async def _request(self, spec: ServerSpec, method: str, timeout: float, *args: Any) -> dict[str, Any]:
        session = await self._session(spec)
        try:
            with anyio.fail_after(timeout):
                result = await getattr(session.client, method)(*args)
        except TimeoutError:
            raise ToolCallTimeout(f"No answer from {spec.name} within {timeout:g} s.") from None
        except MCPError as exc:
            if exc.code == -32000:
                await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        except Exception as exc:
            await self._drop(spec.id)
            raise ToolCallFailed(describe_error(exc, spec=spec)) from None
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _drop(self, server_id: str) -> None:
        session = self._sessions.pop(server_id, None)
        if session is not None:
            await session.close()

    def ensure_session(self, spec: ServerSpec) -> None:
        """Opens (or reuses) the session now, e.g. to start listening for list-changed notices."""
        self._run_coroutine(self._session(spec), spec.timeout_s + 15)

    def close(self, server_id: str) -> None:
        if self._loop is not None and self._loop.is_running():
            self._run_coroutine(self._drop(str(server_id)), 30)

    def close_all(self) -> None:
        for server_id in list(self._sessions):
            self.close(server_id)

    def open_sessions(self) -> list[str]:
        return [sid for sid, s in self._sessions.items() if not s.dead]


pool = Pool()


def call_tool(server_id: UUID | str, tool_name: str, arguments: dict[str, Any] | None = None,
              timeout: float | None = None, *, org_id: UUID | str | None = None,
              server: McpServer | None = None) -> ToolCallResult:
    """Calls `tool_name` on a registered server through this process's pool.

    `org_id`, when given, must own the server (NotFound otherwise). Raises ToolCallFailed /
    ToolCallTimeout; a tool's own error comes back as a result with `is_error=True`.
    Policy (grants, pins, approvals) is the caller's job: this only speaks MCP.
    `server`: the server row the caller read just now (the engine reads it with the live tool at
    dispatch), so the call does not read it again.
    """
    spec = call_spec(server_id, org_id=org_id, server=server)
    return pool.call_tool(spec, tool_name, arguments or {}, float(timeout or spec.timeout_s))


def read_resource(server_id: UUID | str, uri: str, *, org_id: UUID | str, server: McpServer | None = None,
                  timeout: float | None = None) -> dict[str, Any]:
    """`resources/read` of `uri` on a registered server through this process's pool: the result's wire JSON
    (`{"contents": [{"uri", "mimeType", "text" | "blob"}]}`). `org_id` must own the server (NotFound otherwise).
    Raises ToolCallFailed / ToolCallTimeout. Whether the resource may be read is the caller's job."""
    spec = call_spec(server_id, org_id=org_id, server=server)
    return pool.read_resource(spec, uri, float(timeout or spec.timeout_s))


def call_spec(server_id: UUID | str, *, org_id: UUID | str | None = None,
              server: McpServer | None = None) -> ServerSpec:
    """What `call_tool` reads before the call leaves (`pool.start_call` takes it from there): the enabled
    server's spec. Raises NotFound and ToolCallFailed as `call_tool` does."""
    if server is None or str(server.id) != str(server_id) or (org_id is not None and
                                                              str(server.org_id) != str(org_id)):
        server = selectors.server_by_id(server_id) if org_id is None else selectors.get_server(
            org_id=org_id, server_id=server_id)
    if not server.enabled:
        raise ToolCallFailed(f"The server {server.name!r} is disabled.")
    return current_spec(server)


LIVE_SERVER_FIELDS = ("id", "org_id", "name", "trust_tier", "enabled", "updated_at", "trusted_output",
                      "outside_content", "allow_elicitation", "allow_sampling", "hold_sampling")
_specs: dict[str, tuple[Any, ServerSpec]] = {}  # server id -> (its updated_at, its spec)


def current_spec(server: McpServer) -> ServerSpec:
    """The server's connection spec, decrypted once per version of its row: every change to a server goes
    through `services` and `save()`, which moves `updated_at`. `server` may be a row read with only
    LIVE_SERVER_FIELDS (the engine's per-step read): its secrets are then read only when it changed."""
    cached = _specs.get(str(server.id))
    due = cached[1].oauth_refresh_due if cached is not None else None
    if cached is not None and cached[0] == server.updated_at and (due is None or time.time() < due):
        return cached[1]
    if server.get_deferred_fields() or cached is not None:
        server = selectors.server_by_id(server.id)
    if oauth.needs_refresh(server.oauth if (server.oauth_secrets or {}).get("access_token") else None):
        from apps.registry import services  # services sit above the pool; only this refresh writes

        if not services.ensure_fresh_token(server):
            raise ToolCallFailed(f"The server {server.name!r} needs authorization: {server.last_error}")
    spec = spec_for(server)
    _specs[str(server.id)] = (server.updated_at, spec)
    return spec
