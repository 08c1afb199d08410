"""Airlock's ASGI app with plainer HTTP handlers, for bench/web_cpu.py's `--against`:

- `bench.web_twin:application`: Django's own `ASGIHandler` (the plain twin of apps/core/handler.py);
- `bench.web_twin:fresh_threads`: apps/core/handler.py's handler with Django's thread per request (a new executor
  for each request, shut down after it), to measure the kept threads alone."""

from channels.routing import ProtocolTypeRouter
from django.core.handlers.asgi import ASGIHandler

import config.asgi as airlock
from apps.core.handler import OneTripASGIHandler
from apps.core.log_context import RequestIds


class FreshThreads(OneTripASGIHandler):
    __call__ = ASGIHandler.__call__


def _app(handler) -> ProtocolTypeRouter:
    return ProtocolTypeRouter({"http": RequestIds(handler),
                               "websocket": airlock.application.application_mapping["websocket"]})


application = _app(ASGIHandler())
fresh_threads = _app(FreshThreads())
