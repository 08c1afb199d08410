"""Speaking MCP to one registered server: build the transport (sandboxed stdio for third_party
servers, the egress guard for HTTP), connect with the SDK 2.x `Client` (either protocol era),
list everything with pagination, and turn any failure into one readable sentence.

Nothing here touches the database: services hand in a `ServerSpec` and store what comes back.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import anyio
import httpx2
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from apps.audit.redaction import redact_text, values_pattern
from apps.core.egress import EgressRefused, check_url, guarded_transport
from apps.registry import oauth, sandbox
from apps.registry.models import McpServer, Transport, TrustTier

CLIENT_INFO = Implementation(name="airlock", version="0.1.0")
MAX_PAGES = 50
MessageHandler = Callable[[Any], Awaitable[None]]


class ServerUnreachable(Exception):
    """Connecting to or talking with a server failed; `str(exc)` is safe to store and show."""


@dataclass(frozen=True)
class ServerSpec:
    """Everything needed to reach one server (secrets decrypted: keep it in memory only)."""

    id: str
    org_id: str
    name: str
    transport: str
    trust_tier: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    oauth_refresh_due: float | None = None  # when its OAuth access token should be refreshed (oauth.refresh_due)

    @functools.cached_property  # the pool compares it on every call; a spec never changes once built
    def fingerprint(self) -> str:
        """Changes whenever the way to reach the server changes (the pool restarts on it)."""
        body = json.dumps([self.transport, self.trust_tier, self.command, self.args, self.env, self.cwd,
                           self.url, self.headers, self.timeout_s], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def secret_values(self) -> list[str]:
        values = [*self.env.values(), *self.headers.values()]
        values += [v.split(" ", 1)[1] for v in self.headers.values() if " " in v]  # "Bearer <token>"
        return [v for v in values if len(v) >= 4]


def _headers(server: McpServer) -> dict[str, str]:
    headers = dict(server.headers or {})
    access_token = (server.oauth_secrets or {}).get("access_token")
    if access_token:  # OAuth (apps/registry/oauth.py) wins over a static bearer token
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {access_token}"
    return headers


def spec_for(server: McpServer) -> ServerSpec:
    return ServerSpec(
        id=str(server.id), org_id=str(server.org_id), name=server.name, transport=server.transport,
        trust_tier=server.trust_tier, command=server.command, args=tuple(server.args or ()),
        env=dict(server.env or {}), cwd=server.cwd, url=server.url, headers=_headers(server),
        timeout_s=float(server.timeout_s or 30),
        oauth_refresh_due=oauth.refresh_due(server.oauth) if (server.oauth_secrets or {}).get("access_token")
        else None,
    )


def _stdio_params(spec: ServerSpec) -> StdioServerParameters:
    if spec.trust_tier != TrustTier.THIRD_PARTY:
        return StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env, cwd=spec.cwd or None)
    argv = sandbox.sandbox_argv(name=spec.id, command=spec.command, args=list(spec.args), env=spec.env,
                                cwd=spec.cwd)
    # The SDK merges HOME/PATH/... into the child's environment; the launcher execs bwrap with
    # an empty one, so none of it reaches the sandbox.
    return StdioServerParameters(command=argv[0], args=argv[1:], env={})


@asynccontextmanager
async def connect(spec: ServerSpec, *, errlog: IO[str] | None = None, message_handler: MessageHandler | None = None,
                  http_errors: list[int] | None = None, elicitation_callback: Any = None,
                  sampling_callback: Any = None, logging_callback: Any = None,
                  log_level: str | None = None, stream_opened: anyio.Event | None = None) -> AsyncIterator[Client]:
    """An open, negotiated `Client` for the server. Raises whatever the SDK raises.

    `http_errors` collects HTTP error statuses (the SDK reports a 401 as a generic -32603).
    `elicitation_callback` / `sampling_callback`: how a server's requests during a call are answered
    (apps/registry/host.py); without them the SDK answers "not supported". `logging_callback` hears the
    server's log messages; `log_level` asks a 2026-07-28 server for them (a handshake-era server is asked
    with `logging/setLevel` once connected). `stream_opened` is set when the server has answered the GET that
    opens a handshake-era HTTP session's stream for the server's own messages (or refused it), or has shown
    that there is no session to open one for."""
    if spec.transport == Transport.STDIO:
        transport: Any = stdio_client(_stdio_params(spec), errlog=errlog or sys.stderr)
    else:
        await anyio.to_thread.run_sync(check_url, spec.url)
        async def note_status(response: httpx2.Response) -> None:
            if response.status_code >= 400 and http_errors is not None:
                http_errors.append(response.status_code)
            if stream_opened is not None and (response.request.method == "GET" or (
                    response.status_code == 200 and "mcp-session-id" not in response.headers)):
                stream_opened.set()  # answered, or no session: no such stream will open

        http = httpx2.AsyncClient(headers=spec.headers, timeout=httpx2.Timeout(spec.timeout_s),
                                  event_hooks={"response": [note_status]}, transport=guarded_transport(),
                                  follow_redirects=False, trust_env=False)
        transport = streamable_http_client(spec.url, http_client=http)
    client = Client(transport, read_timeout_seconds=spec.timeout_s, message_handler=message_handler,
                    client_info=CLIENT_INFO, elicitation_callback=elicitation_callback,
                    sampling_callback=sampling_callback, logging_callback=logging_callback, log_level=log_level)
    async with client:
        yield client


@dataclass
class Discovery:
    protocol_version: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: str
    tools: list[dict[str, Any]]
    resources: list[dict[str, Any]]
    resource_templates: list[dict[str, Any]]
    prompts: list[dict[str, Any]]
    warnings: list[str]


def _dump(item: Any) -> dict[str, Any]:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _all_pages(fetch: Callable[..., Awaitable[Any]], attr: str) -> list[dict[str, Any]]:
    items, cursor = [], None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor=cursor, cache_mode="refresh")
        items += [_dump(i) for i in getattr(page, attr)]
        if (cursor := page.next_cursor) is None:
            return items
    raise ServerUnreachable(f"The server kept paginating after {MAX_PAGES} pages.")


def tool_fields(wire: dict[str, Any]) -> dict[str, Any]:
    """A listed tool (wire JSON) as the fields the registry stores."""
    return {
        "name": wire.get("name", ""), "title": wire.get("title") or "", "description": wire.get("description") or "",
        "input_schema": wire.get("inputSchema") or {}, "output_schema": wire.get("outputSchema"),
        "annotations": wire.get("annotations") or None, "icons": wire.get("icons") or [],
    }


METHOD_NOT_FOUND = -32601  # JSON-RPC


async def _optional(client: Client, capability: Any, fetch: str, attr: str, warnings: list[str]) -> list[dict]:
    if capability is None:
        return []
    try:
        return await _all_pages(getattr(client, fetch), attr)
    except MCPError as exc:
        if exc.code == METHOD_NOT_FOUND:  # an optional list the server simply lacks (resource templates in 1.x)
            return []
        warnings.append(f"Listing {attr} failed: {exc.message}")
        return []


async def discover(spec: ServerSpec, *, errlog: IO[str] | None = None,
                   http_errors: list[int] | None = None) -> Discovery:
    """Connects, negotiates, and lists tools, resources, resource templates and prompts."""
    with anyio.fail_after(spec.timeout_s):
        async with connect(spec, errlog=errlog, http_errors=http_errors) as client:
            caps = client.server_capabilities
            warnings: list[str] = []
            tools = await _all_pages(client.list_tools, "tools") if caps.tools is not None else []
            return Discovery(
                protocol_version=client.protocol_version,
                server_info=_dump(client.server_info) if client.server_info else {},
                capabilities=_dump(caps),
                instructions=client.instructions or "",
                tools=[tool_fields(t) for t in tools],
                resources=await _optional(client, caps.resources, "list_resources", "resources", warnings),
                resource_templates=await _optional(client, caps.resources, "list_resource_templates",
                                                   "resource_templates", warnings),
                prompts=await _optional(client, caps.prompts, "list_prompts", "prompts", warnings),
                warnings=warnings,
            )


def run_to_completion(coroutine: Any) -> Any:
    """asyncio.run, or on a short-lived thread when this thread already runs a loop (a Channels or
    Playwright caller): `asyncio.run` refuses to nest."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def run_discovery(spec: ServerSpec) -> Discovery:
    """`discover` from synchronous code. Raises ServerUnreachable with a readable message."""
    http_errors: list[int] = []
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            return run_to_completion(discover(spec, errlog=errlog, http_errors=http_errors))
        except Exception as exc:
            message = describe_error(exc, spec=spec, stderr=stderr_tail(errlog), http_errors=http_errors)
            raise ServerUnreachable(message) from None


def stderr_tail(errlog: IO[str], lines: int = 4) -> str:
    try:
        errlog.flush()
        errlog.seek(0)
        text = errlog.read()[-4000:]
    except (OSError, ValueError):
        return ""
    return "\n".join(line for line in text.strip().splitlines()[-lines:])


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The real errors inside (nested) exception groups, cancellations last."""
    if isinstance(exc, BaseExceptionGroup):
        found = [leaf for sub in exc.exceptions for leaf in leaf_exceptions(sub)]
        return sorted(found, key=lambda e: isinstance(e, asyncio.CancelledError))
    return [exc]


def _explain(exc: BaseException, spec: ServerSpec) -> str:
    where = spec.url if spec.transport == Transport.HTTP else spec.command
    if isinstance(exc, EgressRefused | sandbox.SandboxUnavailable | ServerUnreachable):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"Command not found: {spec.command}" + (f" ({exc})" if "sandbox" in str(exc) else "")
    if isinstance(exc, PermissionError):
        return f"Command cannot be executed (permission denied): {spec.command}"
    if isinstance(exc, TimeoutError):
        return f"No answer from the server within {spec.timeout_s:g} s."
    if isinstance(exc, MCPError):
        if exc.code == -32001:
            return f"No answer from the server within {spec.timeout_s:g} s."
        if exc.code == -32000:
            return "The server closed the connection (it exited or crashed)."
        return f"The server answered with an error ({exc.code}): {exc.message}"
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        if code in (401, 403):
            return f"The server refused the credentials (HTTP {code}): check the token or headers."
        return f"The server answered HTTP {code} at {where}."
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionError):
        return f"Could not connect to {where}: {exc or 'connection refused'}."
    if isinstance(exc, httpx2.HTTPError):
        return f"HTTP failure talking to {where}: {exc}"
    if isinstance(exc, pydantic.ValidationError | json.JSONDecodeError | ValueError):
        first = str(exc).splitlines()[0][:200]
        return f"The server sent something that is not valid MCP/JSON-RPC: {first}"
    return f"{type(exc).__name__}: {exc}"


def describe_error(exc: BaseException, *, spec: ServerSpec, stderr: str = "", http_errors: list[int] = ()) -> str:
    """One readable sentence (plus the server's last stderr lines), never a traceback, no secrets."""
    leaf = leaf_exceptions(exc)[0]
    denied = [code for code in http_errors if code in (401, 403)]
    if denied:
        message = f"The server refused the credentials (HTTP {denied[0]}): check the token or headers."
    elif http_errors and isinstance(leaf, MCPError) and leaf.code == -32603:
        message = f"The server answered HTTP {http_errors[0]} at {spec.url}."
    else:
        message = _explain(leaf, spec)
    if stderr and spec.transport == Transport.STDIO:
        # a word cut in two at the front could be the tail of a secret, which no value match would find
        tail = stderr if len(stderr) <= 600 else stderr[-600:].split(maxsplit=1)[-1]
        message += f"\nServer output: {tail}"
    # The server's own secrets, in any spelling, and credential shapes; the caller that knows the organisation
    # masks its other secrets too (`apps.audit.org_secrets`): this runs on the pool's loop, without a database.
    return redact_text(message, values_pattern(spec.secret_values))[:2000]
