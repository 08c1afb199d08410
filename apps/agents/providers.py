"""The provider layer: a pydantic-ai model from an LLM connection's settings.

Plain values in, a `pydantic_ai.models.Model` out; the engine builds models per process from
its run snapshot with `build_model`, the connection page's "test connection" button uses
`check_connection`. Provider HTTP is pydantic-ai's (OpenAI and Anthropic SDKs), never ours, but
their HTTP client is: it connects through the egress guard (`apps.core.egress`), which checks
every connect, redirects included, so a base URL can never reach a loopback, private or metadata
address the operator did not allow.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
from pydantic_ai import direct
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UserError
from pydantic_ai.messages import ModelRequest, TextPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

from apps.agents.scripted import scripted_model
from apps.audit.redaction import redact_text, values_pattern
from apps.core.egress import EgressRefused, guarded_transport, save_time_error

PROVIDERS = ("scripted", "openai", "openai_compatible", "anthropic")
NEEDS_BASE_URL = {"openai_compatible"}
DEFAULT_TIMEOUT_S = 30.0
MODELS_KEPT = 32  # provider models (SDK clients) a thread keeps warm
CHECK_TIMEOUT_S = 10.0
# The engine owns retries (with backoff and jitter); the SDKs must not retry behind its back.
BASE_SETTINGS: ModelSettings = {"max_retries": 0, "timeout": DEFAULT_TIMEOUT_S}
T = TypeVar("T")


_thread = threading.local()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion from sync code, even where this thread already runs an event loop
    (then on a short-lived thread of its own).

    The thread keeps its event loop between calls: a worker's model clients and their HTTP connections
    (`build_model` caches them) stay usable, where `asyncio.run` would close the loop they belong to after
    every call. `run_until_complete`, not `asyncio.Runner.run`: on a main thread the Runner reads and swaps
    the SIGINT handler twice around every call (signal's enum conversions: ~2 % of a bench step), for a
    Ctrl-C cancellation that a worker, whose signals Celery owns, does not use."""
    if not _loop_running():
        loop = getattr(_thread, "loop", None)
        if loop is None or loop.is_closed():
            loop = _thread.loop = asyncio.new_event_loop()
        return loop.run_until_complete(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@dataclass(frozen=True)
class ConnectionSpec:
    """What a model needs from an LLM connection (the API key already decrypted)."""

    provider: str
    base_url: str = ""
    api_key: str | None = None


def clean_base_url(value: str) -> str:
    """Checks a base URL's shape (http/https, a host) and that the egress guard lets it through (a name
    that does not resolve yet passes: every connect is checked). Raises ValueError with a message for the form."""
    value = (value or "").strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("Use an http:// or https:// URL, e.g. http://localhost:11434/v1.")
    if parts.username or parts.password:
        raise ValueError("Put credentials in the API key, not in the URL.")
    if message := save_time_error(value):
        raise ValueError(message)
    return value.rstrip("/")


def guarded_http_client(timeout_s: float) -> httpx2.AsyncClient:
    """The SDKs' HTTP client: every connect (redirect hops too) goes through the egress guard;
    proxy variables are ignored, or the proxy, not the provider, would be the checked address."""
    return httpx2.AsyncClient(transport=guarded_transport(), trust_env=False,
                              timeout=httpx2.Timeout(timeout_s, connect=min(timeout_s, 5.0)))


def build_model(spec: ConnectionSpec, *, model_name: str, script: list[dict[str, Any]] | None = None,
                inputs: Mapping[str, Any] | None = None, turn_offset: int = 0,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> Model:
    """A ready-to-call pydantic-ai model. Raises ValueError for an unusable configuration.

    Provider models are kept per thread and configuration, so a worker reuses the SDK client and its open
    HTTP connections call after call (a new client per call would pay a TCP and TLS handshake each time)."""
    if spec.provider == "scripted":
        return scripted_model(script or [], inputs=inputs, turn_offset=turn_offset, name=model_name or "scripted")
    if _loop_running():  # run_blocking will use a short-lived loop: a kept client would outlive it
        return _provider_model(spec, model_name=model_name, timeout_s=timeout_s)
    models = getattr(_thread, "models", None)
    if models is None:
        models = _thread.models = {}
    key = (spec, model_name, timeout_s)
    if key not in models:
        if len(models) >= MODELS_KEPT:
            models.pop(next(iter(models)))  # the oldest: connections rotate rarely
        models[key] = _provider_model(spec, model_name=model_name, timeout_s=timeout_s)
    return models[key]


def _provider_model(spec: ConnectionSpec, *, model_name: str, timeout_s: float) -> Model:
    settings: ModelSettings = {**BASE_SETTINGS, "timeout": timeout_s}
    if not model_name:
        raise ValueError("Choose a model name for this agent.")
    if spec.provider in ("openai", "openai_compatible"):
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        if spec.provider == "openai_compatible" and not spec.base_url:
            raise ValueError("An OpenAI-compatible connection needs a base URL.")
        # Local servers (Ollama, vLLM) often take no key, but the SDK insists on one.
        provider = OpenAIProvider(base_url=spec.base_url or None, api_key=spec.api_key or "not-needed",
                                  http_client=guarded_http_client(timeout_s))
        return OpenAIChatModel(model_name, provider=provider, settings=settings)
    if spec.provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        provider = AnthropicProvider(api_key=spec.api_key or "missing-key", base_url=spec.base_url or None,
                                     http_client=guarded_http_client(timeout_s))
        return AnthropicModel(model_name, provider=provider, settings=settings)
    raise ValueError(f"Unknown provider {spec.provider!r}.")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    message: str  # shown to the person who pressed "test connection"
    latency_ms: int | None = None


def check_connection(spec: ConnectionSpec, *, model_name: str, timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Makes one tiny real call (a few output tokens) and says what happened, in the provider's words."""
    if spec.provider == "scripted":
        return CheckResult(True, "The scripted provider is built in: no network, always available.")
    started = time.monotonic()
    try:
        model = build_model(spec, model_name=model_name, timeout_s=timeout_s)
        response = run_blocking(asyncio.wait_for(direct.model_request(
            model, [ModelRequest.user_text_prompt("Reply with the single word OK.")],
            model_settings={"max_tokens": 5, "max_retries": 0, "timeout": timeout_s},
        ), timeout=timeout_s + 2))
    except (ValueError, UserError) as exc:
        return CheckResult(False, _scrub(str(exc), spec))
    except EgressRefused as exc:  # at connect time: the URL was saved while allowed, or its DNS changed since
        return CheckResult(False, f"Airlock refused to connect: {exc}")
    except httpx2.InvalidURL as exc:
        return CheckResult(False, f"The base URL is not a URL the HTTP client can use: {exc}")
    except TimeoutError:
        return CheckResult(False, f"No answer from {_where(spec)} within {timeout_s:.0f} seconds.")
    except ModelHTTPError as exc:
        return CheckResult(False, _scrub(f"{_where(spec)} answered HTTP {exc.status_code}: {_body_message(exc)}",
                                         spec))
    except ModelAPIError as exc:
        return CheckResult(False, _scrub(f"Could not reach {_where(spec)}: {_root_message(exc)}", spec))
    latency = int((time.monotonic() - started) * 1000)
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart)).strip()
    return CheckResult(True, f"Connected to {_where(spec)}: {response.model_name or model_name} replied "
                             f"{text[:40]!r} in {latency} ms.", latency)


def _where(spec: ConnectionSpec) -> str:
    if spec.base_url:
        return urlsplit(spec.base_url).netloc or spec.base_url
    return {"openai": "OpenAI", "anthropic": "Anthropic"}.get(spec.provider, spec.provider)


def _body_message(exc: ModelHTTPError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return str(body or exc.message or "no details")[:2000]


def _root_message(exc: BaseException) -> str:
    """The innermost cause's message (\"Connection refused\", \"Name or service not known\")."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    message = str(seen) or type(seen).__name__
    return message if seen is exc else f"{exc.message if hasattr(exc, 'message') else exc} ({message})"


def _scrub(message: str, spec: ConnectionSpec) -> str:
    """Never echo a key back, even when a provider quotes it in an error (in any spelling), nor anything
    shaped like a credential. The caller that knows the organisation masks its other secrets too
    (`apps.audit.org_secrets`), and cuts the message short only after that."""
    return redact_text(message, values_pattern([spec.api_key or ""]))
