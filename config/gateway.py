"""The MCP gateway's ASGI app: `uvicorn config.gateway:app` serves the endpoint at `/mcp`.

Its own process beside the web app: the MCP session manager needs an ASGI lifespan, which
Django's handler refuses. Django is set up first; the app is `apps.gateway.app.build_app`.
"""

import gc
import os

import django
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if not settings.configured:  # this process serves ASGI (not a test process importing the app)
    os.environ.setdefault("AIRLOCK_DB_POOL", "1")  # Postgres connections from a pool, not one per thread
django.setup()

from apps.core import tracing  # noqa: E402
from apps.gateway.app import build_app  # noqa: E402

tracing.configure("gateway")  # the gateway's tool calls as spans when an OTLP endpoint is set

app = build_app()

# What start-up loaded (Django, the MCP SDK, pydantic's schemas) lives as long as the process: keep it
# out of every collection, and collect the young generation less often (a call allocates thousands
# of short-lived objects; at the default threshold of 700 a call paid several collections).
gc.collect()
gc.freeze()
gc.set_threshold(10_000, 20, 20)
