"""What an MCP server may ask of Airlock while one of its tools runs: elicitation (`elicitation/create`: a
form for a person) and sampling (`sampling/createMessage`: a run of a model).

The pool answers them through a `CallHost` bound to the call that caused them (the run engine's
apps/runs/engine/server_requests.py). A server whose settings do not allow a request gets a clear refusal
(an MCP error naming the setting), never a silent "not supported". The host's methods block (they wait
for a person or a model): the pool runs them on a thread, so its event loop keeps serving other calls.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio
from mcp import types

ELICITATION_OFF = ("Airlock declined: the server {name!r} may not ask people for input (its elicitation setting "
                   "is off; an admin can turn it on on the server's page).")
SAMPLING_OFF = ("Airlock declined: the server {name!r} may not run a model through Airlock (its sampling setting "
                "is off; an admin can turn it on on the server's page).")
URL_ELICITATION = "Airlock declined: URL elicitation is not supported; ask with a form."


class CallHost(Protocol):
    """Answers one call's server requests. `deadline` is the call's timeout as a `time.monotonic()` value:
    an answer after it is useless (the call has failed by then)."""

    def elicit(self, *, message: str, schema: dict[str, Any], deadline: float) -> dict[str, Any]:
        """{"action": "accept"|"decline"|"cancel", "content": {...}} (content only with accept)."""
        ...

    def sample(self, *, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        """{"text", "model", "stop_reason"} or {"error": a sentence the server may read}."""
        ...


def declining(server_name: str) -> dict[str, Any]:
    """Callbacks for a session no call is bound to (the pooled ones): both requests are refused, by setting."""

    async def elicit(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message=ELICITATION_OFF.format(name=server_name))

    async def sample(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message=SAMPLING_OFF.format(name=server_name))

    return {"elicitation_callback": elicit, "sampling_callback": sample}


def hosted(server_name: str, host: CallHost, *, allow_elicitation: bool, allow_sampling: bool,
           deadline: float) -> dict[str, Any]:
    """Callbacks for a session opened for one call: allowed requests go to `host`, the rest are refused."""
    refuse = declining(server_name)

    async def elicit(context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        if not allow_elicitation:
            return await refuse["elicitation_callback"](context, params)
        if getattr(params, "mode", "form") == "url":
            return types.ErrorData(code=types.INVALID_REQUEST, message=URL_ELICITATION)
        schema = params.requested_schema
        schema = schema.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(schema, "model_dump") \
            else dict(schema or {})
        answer = await anyio.to_thread.run_sync(
            lambda: host.elicit(message=params.message, schema=schema, deadline=deadline), abandon_on_cancel=True)
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    async def sample(context: Any, params: types.CreateMessageRequestParams) -> Any:
        if not allow_sampling:
            return await refuse["sampling_callback"](context, params)
        request = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        answer = await anyio.to_thread.run_sync(lambda: host.sample(request=request, deadline=deadline),
                                                abandon_on_cancel=True)
        if "error" in answer:
            return types.ErrorData(code=types.INVALID_REQUEST, message=answer["error"])
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=answer["text"]),
                                         model=answer.get("model") or "unknown",
                                         stop_reason=answer.get("stop_reason") or "endTurn")

    return {"elicitation_callback": elicit, "sampling_callback": sample}
