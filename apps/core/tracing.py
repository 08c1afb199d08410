"""OpenTelemetry traces: a run is one trace across processes, exported over OTLP when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set (the SDK reads its other `OTEL_*` settings too).

Without the endpoint nothing is imported or recorded: `span()` hands back one shared no-op context
and `record()` returns at once, so the step path pays a global check and nothing more.

A run's trace: `run.start` (in the request that started it) is the root; its context is kept on the
run (`Run.trace_parent`, a W3C traceparent), so every task that advances the run later, in any
worker, and a person's decision in a later request, join the same trace: `run.advance` → `run.step` →
`model.call` / `tool.call` (recorded with their real start and end), `tool.held`, and `approval.wait`
(from the hold to the decision) → the `run.advance` that resumes it.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from datetime import datetime
from typing import Any

_tracer: Any = None
_NOOP = nullcontext()


def configure(service: str) -> bool:
    """Called once per process (web, gateway, each worker child). False when no endpoint is set."""
    global _tracer
    if _tracer is not None:
        return True
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME", "airlock")
    provider = TracerProvider(resource=Resource.create({"service.name": name, "airlock.process": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("airlock")
    return True


def enabled() -> bool:
    return _tracer is not None


def _context(parent: str):
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": parent}) if parent else None


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """Span attributes: ids, names, counts and states only (never arguments, results or prompts)."""
    return {f"airlock.{k}": (v if isinstance(v, (bool, int, float)) else str(v)) for k, v in values.items()
            if v is not None and v != ""}


def span(name: str, *, parent: str = "", **attributes: Any):
    """A span around a block; `parent`: a traceparent to join (a run's) instead of the current span."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, context=_context(parent), attributes=_attributes(attributes))


def record(name: str, *, start: datetime | None, end: datetime | None, parent: str = "", **attributes: Any) -> None:
    """A span for something already done (a model call, a tool call, a wait), with its real times."""
    if _tracer is None or start is None or end is None:
        return
    done = _tracer.start_span(name, context=_context(parent), attributes=_attributes(attributes),
                              start_time=int(start.timestamp() * 1e9))
    done.end(end_time=int(end.timestamp() * 1e9))


def traceparent() -> str:
    """The current span's context as a W3C traceparent ('' when tracing is off)."""
    if _tracer is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")
