"""What the gateway passes between a host and the servers behind it while it forwards, under policy.

- **Progress**: a host's `progressToken` on `tools/call` asks for the server's progress notifications; they
  come back to it on the call's stream (`HostLink`). A held call sends its own progress while it waits.
- **Log messages**: a host asks with `logging/setLevel` (handshake era, per host session: `HostLevels`) or
  with the `_meta` log level of its request (2026-07-28). A call whose server logs then runs on a session
  of its own, told that host's level only, and the messages go back to that host alone (`CallRelay.log`).
- **Elicitation and sampling**: a server may ask only as its settings allow (the same as in runs:
  apps/registry/host.py), and only a host that declared the capability can be asked. A request the gateway
  cannot pass on is refused with a sentence that says why. With `hold_sampling` a person approves first in
  the inbox. Every request is recorded on the gateway session's run (`ledger.record_relay`). A 2026-07-28
  host, which cannot be sent a request, is asked between the legs of its `tools/call` (`PendingCall`).

Resource subscriptions are in `apps.gateway.subscriptions`.

Nothing the server sends reaches the host with the organisation's secrets in it: text (log data, progress
messages, what it asks) goes through `OrgSecrets` first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from secrets import token_urlsafe
from typing import Any

import anyio
from django.utils import timezone
from mcp import MCPError, types
from mcp.server.connection import LOG_LEVEL_META_KEY
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from apps.audit.org_secrets import OrgSecrets
from apps.gateway import ledger
from apps.gateway.catalog import ServerRelay
from apps.registry.host import ELICITATION_OFF, SAMPLING_OFF, URL_ELICITATION
from apps.runs.engine.server_requests import TEXT_KEPT, sampling_prompt

logger = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
HOLD_POLL_S = 0.25
MARGIN_S = 1.0  # an answer must reach the server before the call's own timeout fires
NOT_DECLARED = ("Airlock declined: the host calling through the gateway ({host}) did not declare {capability}, so "
                "there is no one to ask.")
NO_BACK_CHANNEL = ("Airlock declined: the host ({host}) cannot be asked on this request (it speaks MCP "
                   "{version} without a stream back to it).")

Db = Callable[..., Awaitable[Any]]  # the gateway's one door to the database (server._db)


def at_or_above(level: str, threshold: str | None) -> bool:
    if threshold not in LOG_LEVELS:
        return False
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold) if level in LOG_LEVELS else True


class HostLevels:
    """The log level each handshake-era host session set (`logging/setLevel`), by (key id, session id). A
    2026-07-28 host sets it per request instead (`_meta`). Nothing here reaches a shared server session."""

    def __init__(self) -> None:
        self._levels: dict[tuple[str, str], tuple[str, float]] = {}

    def set(self, bucket: tuple[str, str], level: str) -> None:
        self._levels[bucket] = (level, time.monotonic())

    def of(self, ctx: Any, bucket: tuple[str, str]) -> str | None:
        """The level this request's host asked for, or None (no log messages wanted)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            level = (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
            return level if level in LOG_LEVELS else None
        entry = self._levels.get(bucket)
        if entry is None:
            return None
        self._levels[bucket] = (entry[0], time.monotonic())
        return entry[0]

    def forget_idle(self, cutoff: float) -> None:
        for bucket, (_, at) in list(self._levels.items()):
            if at < cutoff:
                self._levels.pop(bucket, None)


def host_name(ctx: Any) -> str:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None) if params is not None else None
    return f"{info.name} {info.version}".strip() if info is not None else "the MCP host"


def host_declares(ctx: Any, capability: str) -> bool:
    caps = ctx.session.client_capabilities
    return caps is not None and getattr(caps, capability, None) is not None


def wants_progress(ctx: Any) -> bool:
    return (ctx.meta or {}).get("progress_token") is not None


class HostLink:
    """The host's request a forwarded call answers, and what the server sends it meanwhile: progress and log
    messages. The SDK hands each over in a task of its own: they are sent one at a time, in the order they
    came (the lock is fair), progress never going backwards; `settled` waits for those still on their way, so
    that none comes after the call's answer has closed the request's stream. The org's secrets are read before
    the call (`open`), so masking them costs nothing in between."""

    def __init__(self, ctx: Any, secrets: OrgSecrets) -> None:
        self.ctx = ctx  # the host's request open now (a 2026-07-28 host's next leg takes over)
        self.secrets = secrets
        self._turn = anyio.Lock()
        self._busy = 0
        self._progress = float("-inf")

    @classmethod
    async def open(cls, ctx: Any, org_id: str, db: Db) -> HostLink:
        secrets = OrgSecrets(org_id)
        await db(lambda: secrets.pattern)
        return cls(ctx, secrets)

    async def progress(self, value: float, total: float | None, message: str | None) -> None:
        self._busy += 1
        try:
            async with self._turn:
                if value < self._progress:
                    return
                self._progress = value
                await self.ctx.session.report_progress(value, total, self.secrets.redact(message) if message
                                                       else message)
        except Exception:  # a host that went away loses its progress, not the call
            logger.debug("relaying progress failed", exc_info=True)
        finally:
            self._busy -= 1

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self._busy += 1
        try:
            async with self._turn:
                await self.ctx.session.send_log_message(
                    params.level, self.secrets.redact_all(params.data),
                    self.secrets.redact(params.logger) if params.logger else None,
                    related_request_id=self.ctx.request_id)
        except Exception:
            logger.debug("relaying a log message failed", exc_info=True)
        finally:
            self._busy -= 1

    async def settled(self, timeout: float = 2.0) -> None:
        with anyio.move_on_after(timeout):
            await anyio.sleep(0)  # the tasks the SDK started before the call's answer came start first
            while self._busy:
                await anyio.sleep(0.005)


@dataclass
class CallTrace:
    """Where one forwarded call's relayed requests are recorded: the gateway session's run and the call's row."""

    org_id: str
    run_id: str
    agent_id: str
    tool_call_id: str
    tool_id: str | None
    tool: str  # qualified name


@dataclass
class CallRelay:
    """One forwarded call's way back to the host that made it, on a server session opened for the call."""

    link: HostLink
    server: ServerRelay
    trace: CallTrace
    db: Db
    log_level: str | None
    timeout: float
    started: float = field(default_factory=time.monotonic)
    pending: PendingCall | None = None  # a 2026-07-28 host: asked between the legs of its tools/call

    @property
    def ctx(self) -> Any:
        return self.link.ctx

    @property
    def between_legs(self) -> bool:
        """The host cannot be asked in the middle of its request (2026-07-28: no request from server to client)."""
        return not self.ctx.session.can_send_request

    @property
    def deadline(self) -> float:
        return self.started + self.timeout

    def callbacks(self) -> dict[str, Any]:
        return {"elicitation_callback": self.elicit, "sampling_callback": self.sample}

    async def _record(self, type: str, **data: Any) -> None:
        await self.db(ledger.record_relay, self.trace.run_id, type, tool_call_id=self.trace.tool_call_id,
                      server=self.server.name, tool=self.trace.tool, **data)

    async def _refuse(self, kind: str, reason: str) -> types.ErrorData:
        await self._record(f"{kind}.refused", reason=reason)
        return types.ErrorData(code=types.INVALID_REQUEST, message=reason)

    def _unreachable(self, capability: str) -> str:
        """Why the host cannot be asked for `capability` on this request, or ''."""
        if not host_declares(self.ctx, capability):
            return NOT_DECLARED.format(host=host_name(self.ctx), capability=capability)
        if self.pending is None and not self.ctx.session.can_send_request:
            return NO_BACK_CHANNEL.format(host=host_name(self.ctx), version=self.ctx.protocol_version)
        return ""

    # --- log messages ------------------------------------------------------------------------------

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if at_or_above(params.level, self.log_level):
            await self.link.log(params)

    # --- elicitation -------------------------------------------------------------------------------

    async def elicit(self, context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        if not self.server.allow_elicitation:
            return await self._refuse("elicitation", ELICITATION_OFF.format(name=self.server.name))
        if getattr(params, "mode", "form") == "url":
            return await self._refuse("elicitation", URL_ELICITATION)
        why = self._unreachable("elicitation")
        if why:
            return await self._refuse("elicitation", why)
        secrets = self.link.secrets
        message = secrets.redact(params.message)
        schema = params.requested_schema
        schema = secrets.redact_all(schema.model_dump(mode="json", by_alias=True, exclude_none=True)
                                    if hasattr(schema, "model_dump") else dict(schema or {}))
        try:
            with anyio.fail_after(max(self.deadline - time.monotonic() - MARGIN_S, 0.1)):
                if self.pending is not None:
                    answer = _as(types.ElicitResult, await self.pending.ask(types.ElicitRequest(
                        params=types.ElicitRequestFormParams(message=message, requested_schema=schema))))
                else:
                    answer = await self.ctx.session.elicit_form(message, schema,
                                                                related_request_id=self.ctx.request_id)
        except (TimeoutError, MCPError, ValidationError) as exc:
            reason = "the call's timeout came first" if isinstance(exc, TimeoutError) else \
                exc.error.message if isinstance(exc, MCPError) else "the host's answer was not a form's answer"
            await self._record("elicitation.relayed", message=message[:500], host=host_name(self.ctx),
                               action="cancel", reason=reason[:500])
            return types.ElicitResult(action="cancel")
        await self._record("elicitation.relayed", message=message[:500], host=host_name(self.ctx),
                           action=answer.action, fields=sorted(answer.content or {}))
        return answer

    # --- sampling ----------------------------------------------------------------------------------

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        if not self.server.allow_sampling:
            return await self._refuse("sampling", SAMPLING_OFF.format(name=self.server.name))
        why = self._unreachable("sampling")
        if why:
            return await self._refuse("sampling", why)
        secrets = self.link.secrets
        params = _redacted_sampling(params, secrets)
        prompt = sampling_prompt(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if self.server.hold_sampling:
            refusal = await self._held_for_a_person(prompt)
            if refusal:
                return types.ErrorData(code=types.INVALID_REQUEST, message=refusal)
        try:
            with anyio.fail_after(max(self.deadline - time.monotonic() - MARGIN_S, 0.1)):
                if self.pending is not None:
                    answer = await self._sampled_between_legs(params)
                else:
                    answer = await self.ctx.session.create_message(
                        params.messages, max_tokens=params.max_tokens, system_prompt=params.system_prompt,
                        include_context=params.include_context, temperature=params.temperature,
                        stop_sequences=params.stop_sequences, metadata=params.metadata,
                        model_preferences=params.model_preferences, tools=params.tools,
                        tool_choice=params.tool_choice,
                        related_request_id=self.ctx.request_id)
        except TimeoutError:
            return await self._refuse("sampling", "Airlock declined: the host did not answer before the call's "
                                                  "timeout.")
        except MCPError as exc:
            await self._record("sampling.refused", reason=f"The host refused: {exc.error.message}"[:500])
            return exc.error
        text = answer.content.text if isinstance(answer.content, types.TextContent) else ""
        await self._record("sampling.relayed", host=host_name(self.ctx), model=answer.model, prompt=prompt,
                           answer=text[:TEXT_KEPT], stop_reason=answer.stop_reason or "")
        return answer

    async def _sampled_between_legs(self, params: types.CreateMessageRequestParams) -> Any:
        if (params.tools or params.tool_choice) and not getattr(self.ctx.session.client_capabilities.sampling,
                                                                 "tools", None):
            raise MCPError(types.INVALID_REQUEST, "The host did not declare sampling with tools.")
        answer = await self.pending.ask(types.CreateMessageRequest(params=params))
        try:
            return _as(types.CreateMessageResultWithTools if params.tools else types.CreateMessageResult, answer)
        except ValidationError:
            raise MCPError(types.INVALID_REQUEST, "The host's answer was not a model's answer.") from None

    async def _held_for_a_person(self, prompt: dict[str, Any]) -> str:
        """Waits for a person's decision on the request in the inbox: '' once approved, else why not."""
        left = self.deadline - time.monotonic() - MARGIN_S
        expires_at = timezone.now() + timedelta(seconds=max(left, 0))
        approval_id = await self.db(ledger.open_sampling_hold, org_id=self.trace.org_id, run_id=self.trace.run_id,
                                    agent_id=self.trace.agent_id, tool_call_id=self.trace.tool_call_id,
                                    tool_id=self.trace.tool_id, tool=self.trace.tool, server=self.server.name,
                                    host=host_name(self.ctx), prompt=prompt, expires_at=expires_at)
        status, who = "pending", ""
        while status == "pending":
            expire = time.monotonic() >= self.deadline - MARGIN_S
            status, who = await self.db(ledger.sampling_hold_status, approval_id, expire=expire)
            if status == "pending":
                await anyio.sleep(HOLD_POLL_S)
        if status == "approved":
            return ""
        return (f"Airlock declined: a person did not allow this sampling request ({status}"
                + (f" by {who}" if who and who != "expiry" else "") + ").")


def _as(kind: type[BaseModel], answer: Any) -> Any:
    """A host's answer (parsed by the SDK as one of the answers it may be) as the kind that was asked for."""
    if isinstance(answer, kind):
        return answer
    return kind.model_validate(answer.model_dump(mode="json", by_alias=True, exclude_none=True)
                               if isinstance(answer, BaseModel) else answer)


def _redacted_sampling(params: types.CreateMessageRequestParams, secrets: OrgSecrets
                       ) -> types.CreateMessageRequestParams:
    """The request with the org's secrets masked in its text (system prompt, text blocks); images stay as sent."""
    wire = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    if wire.get("systemPrompt"):
        wire["systemPrompt"] = secrets.redact(wire["systemPrompt"])
    for message in wire.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, dict) and block.get("type") == "text":
                block["text"] = secrets.redact(block.get("text") or "")
    return types.CreateMessageRequestParams.model_validate(wire)


# --- a 2026-07-28 host, asked between the legs of its tools/call --------------------------------------

class PendingCall:
    """A forwarded call whose host speaks 2026-07-28, where a server cannot send its client a request: each
    leg of the host's `tools/call` ends with the call's result, or with the questions the server is waiting on
    (an `InputRequiredResult` carrying `request_state`); the host's next leg brings the answers with that state
    and picks the call up again (SEP-2322). The call itself runs in a task of its own between the legs, in
    this gateway process: a leg that reaches another process finds no such call."""

    KEPT_S = 120.0  # a finished call's result stays this long for a host's late leg

    def __init__(self, key_id: str, relay: CallRelay) -> None:
        self.key_id, self.relay = key_id, relay
        self.state = token_urlsafe(24)
        self._asked: dict[str, tuple[Any, asyncio.Future]] = {}
        self._count = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self, work: Coroutine[Any, Any, Any], on_end: Callable[[], None]) -> None:
        self._task = asyncio.get_running_loop().create_task(work, name="gateway:pending-call")
        self._task.add_done_callback(lambda _: self._changed.set())
        self._task.add_done_callback(lambda _: asyncio.get_running_loop().call_later(self.KEPT_S, on_end))

    async def ask(self, request: Any) -> Any:
        """The host's answer to one of the server's requests (the next leg brings it)."""
        self._count += 1
        key, answer = f"q{self._count}", asyncio.get_running_loop().create_future()
        self._asked[key] = (request, answer)
        self._changed.set()
        try:
            return await answer
        finally:
            self._asked.pop(key, None)

    def relay_to(self, ctx: Any) -> None:
        """What the server sends from now on (progress, log messages) goes to the host's request open now."""
        self.relay.link.ctx = ctx

    def answer(self, responses: dict[str, Any]) -> None:
        for key, response in responses.items():
            asked = self._asked.get(key)
            if asked is not None and not asked[1].done():
                asked[1].set_result(response)

    async def leg(self) -> Any:
        """This leg's answer: the call's result once it has one, else the questions waiting for the host."""
        while True:
            self._changed.clear()
            if self._task is not None and self._task.done():
                return self._task.result()
            waiting = {key: request for key, (request, answer) in self._asked.items() if not answer.done()}
            if waiting:
                return types.InputRequiredResult(input_requests=waiting, request_state=self.state)
            await self._changed.wait()
