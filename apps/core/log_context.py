"""What a log line is about: the request, organisation, actor, run and tool call it was written for.

Interfaces bind what they know (the web middleware: request id, org, actor; a run task: the run id;
the engine: the tool call id) and every line written meanwhile carries it (`JsonFormatter`). A
ContextVar, so concurrent requests on one event loop and threads each see their own.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")  # a proxy's X-Request-ID, when it sets a sane one

_fields: ContextVar[dict[str, str]] = ContextVar("airlock_log_context", default={})  # noqa: B039 (never mutated)


def current() -> dict[str, str]:
    return _fields.get()


@contextmanager
def bind(**fields: object) -> Iterator[None]:
    """Adds fields (None ones are left out) for the lines written inside the block."""
    token = _fields.set({**_fields.get(), **{k: str(v) for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _fields.reset(token)


def add(**fields: object) -> None:
    """Adds fields for the rest of the enclosing `bind` block (e.g. the actor, once authentication has
    found it); the block's end restores what was there before."""
    _fields.set({**_fields.get(), **{k: str(v) for k, v in fields.items() if v is not None}})


def request_id(given: str) -> str:
    """The proxy's X-Request-ID when it is a sane token, else a new one."""
    return given if REQUEST_ID.match(given or "") else uuid.uuid4().hex


class RequestIds:
    """ASGI wrapper around the whole HTTP app: binds a request id for every line written while the
    request is served (Django's own `django.request` lines are written after the middleware chain
    returns, so the binding must sit outside it) and returns it as X-Request-ID."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = request_id(given)

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        with bind(request_id=rid):
            await self.app(scope, receive, send_with_id)
