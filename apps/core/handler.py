"""Django's ASGI handler, with the middleware chain and the view in one trip to the sync thread.

Every middleware here is sync (Django's own, WhiteNoise, allauth's and ours), and so are the views. Django's
ASGI handler still builds its chain for async: it enters a request's sync thread for the sync middleware, comes
back to the event loop for its async core (`_get_response_async`), and enters the thread again for the view. Each
crossing restores every context variable of the request, re-homing each asgiref `Local` in it (28 here), and wakes
a thread: about a dozen context restores per request, 12 % of a web process's GIL time in a profile of
`GET /api/v1/me`. Built as WSGI builds it, the chain runs with the view in one call, which the handler makes in
one trip; the rest of the handler (the request's body, `request_started` and `request_finished`, the answer
written in chunks, streaming answers, a client that goes away) is Django's own. The same request cost the web
process 9-17 % less CPU this way (docs/performance-history.md, twenty-fourth round).

Django's handler also gives every request a thread of its own (a new single-thread executor in the request's
`ThreadSensitiveContext`), started for the request and shut down after it: a thread started, a database wrapper
built on it, and the executor's shutdown, for every request. Here a request borrows an idle one instead, and gives it
back when the request is over (asgiref's `ThreadSensitiveContext(executor=...)`, made for this). A request still has
its thread to itself for as long as it runs, so its sync work stays in one thread, in order, as under Django's.

Django's `ASGIHandler` is the plain twin: an async middleware or view would run under it without a change here
(a sync chain runs an async view through `async_to_sync`, as under WSGI), only with the crossings back.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase


class RequestThreads:
    """Single-thread executors for requests' sync work: one taken per request, kept for the next when it is over.

    As many exist as requests run at once (as under Django's handler); up to `keep` idle ones are kept. A process
    serves on one event loop, but a take is one atomic `pop` all the same, so two loops could share the handler."""

    def __init__(self, keep: int = 16) -> None:
        self.keep, self.idle = keep, []

    def take(self) -> ThreadPoolExecutor:
        try:
            return self.idle.pop()
        except IndexError:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < self.keep:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)


class OneTripASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.threads = RequestThreads()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):  # handle() waits for its tasks before it returns
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # thread_sensitive: the request's own sync thread (__call__ opens its ThreadSensitiveContext),
        # where `request_started` and `request_finished` run too, so the request's database connection is the one
        # they open and close.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def get_asgi_application() -> OneTripASGIHandler:
    """As `django.core.asgi.get_asgi_application`, with this handler."""
    django.setup(set_prefix=False)
    return OneTripASGIHandler()
