"""ASGI entry point: HTTP through Django, websockets through Channels (authenticated, origin-checked)."""

import os
import sys

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if not settings.configured:  # this process serves ASGI (not a test process importing the app)
    os.environ.setdefault("AIRLOCK_DB_POOL", "1")  # Postgres connections from a pool, not one per thread
    # The event loop gets the GIL back sooner from the threads running views and renders (config/settings.py).
    sys.setswitchinterval(settings.AIRLOCK_WEB_SWITCH_INTERVAL_MS / 1000)

from apps.core import tracing
from apps.core.handler import get_asgi_application  # Django's, with the chain and the view in one thread trip

if tracing.configure("web"):  # OTEL_EXPORTER_OTLP_ENDPOINT set: a span per request (before the handler is built)
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    DjangoInstrumentor().instrument()
django_asgi_app = get_asgi_application()

from django.urls import get_resolver  # noqa: E402

# Every view and the API's schemas imported now, while the process starts: Django would do it during the first
# request, which then took 0.5 s on a quiet machine and 1.9 s on a busy one (py-spy on bench/approval.py's web).
# The names `{% url %}` and `reverse` look up too: left to first use, each thread of a burst of run pages built the
# whole lookup table at once (URLResolver._populate, 3-5 % of the web processes' CPU under bench/load.py).
_ = get_resolver().url_patterns, get_resolver().reverse_dict


def _compile_templates() -> None:
    """Compiles the project's templates into the cached loader (~75 ms). Left to first use, a burst of sockets
    (every run page reconnecting after a deploy; bench/load.py's 100) each compiled the run page's panels at once:
    a cache miss in every thread, a fifth of the web processes' CPU in the first seconds."""
    from django.template import engines

    engine, root = engines["django"].engine, settings.BASE_DIR / "templates"
    for path in sorted(root.rglob("*.html")):
        engine.get_template(path.relative_to(root).as_posix())


_compile_templates()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.core.log_context import RequestIds  # noqa: E402
from apps.web.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": RequestIds(django_asgi_app),  # a request id on every log line, returned as X-Request-ID
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
