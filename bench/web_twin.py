"""Airlock's ASGI app with Django's own `ASGIHandler` for HTTP (the plain twin of apps/core/handler.py), for
bench/web_cpu.py: `uvicorn bench.web_twin:application`."""

from channels.routing import ProtocolTypeRouter
from django.core.handlers.asgi import ASGIHandler

import config.asgi as airlock
from apps.core.log_context import RequestIds

application = ProtocolTypeRouter({"http": RequestIds(ASGIHandler()),
                                  "websocket": airlock.application.application_mapping["websocket"]})
