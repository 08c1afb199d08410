"""A held-and-approved run as one OpenTelemetry trace across processes, exported over OTLP to a real
local receiver: the API request that started it (web), the worker's steps, model and tool calls, the
hold, the person's wait and decision (a later request), and the resume in the worker."""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.conf import settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from apps.runs.models import Run
from tests.factories import token_for, wait_for_run
from tests.processes import celery_worker, web_server

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An OTLP/HTTP trace receiver (protobuf), as a collector would be."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = ExportTraceServiceRequest.FromString(body)
                for resource in export.resource_spans:
                    process = {a.key: a.value.string_value for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            receiver.spans.append({
                                "name": span.name, "trace": span.trace_id.hex(), "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(), "process": process.get("airlock.process"),
                                "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                                "attributes": {a.key: a.value for a in span.attributes}})
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


wait_for = functools.partial(wait_for_run, timeout=90)


def test_a_held_and_approved_run_is_one_trace_across_web_and_worker(desk, org, tmp_path):
    receiver = Receiver()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "airlock-test",
            # a broker of their own: the session's worker (no tracing) must not take this run's tasks
            "AIRLOCK_TEST_BROKER_PREFIX": f"{settings.RUN_ID}-traced"}
    crew = desk.refund_desk()
    builder = {"Authorization": f"Bearer {token_for(org, 'builder')}"}
    approver = {"Authorization": f"Bearer {token_for(org, 'approver')}"}
    try:
        with web_server(tmp_path, **otel) as url, celery_worker(tmp_path, **otel):
            started = requests.post(f"{url}/api/v1/crews/{crew.id}/runs", headers=builder, timeout=30,
                                    json={"inputs": {"order_id": "A-1001", "amount_cents": 500}})
            assert started.status_code == 201, started.text
            run_id = started.json()["id"]
            wait_for(run_id, {"waiting"})
            pending = requests.get(f"{url}/api/v1/approvals?status=pending", headers=approver, timeout=30).json()
            decided = requests.post(f"{url}/api/v1/approvals/{pending['items'][0]['id']}/decision", headers=approver,
                                    json={"decision": "approve"}, timeout=30)
            assert decided.status_code == 200, decided.text
            assert wait_for(run_id, {"succeeded", "failed"}).status == "succeeded"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(s["name"] == "run.advance" and s["end"] and
                                                          s["process"] == "worker" for s in receiver.spans[3:]):
                time.sleep(0.3)
            time.sleep(1.5)  # the batch processors' last exports
    finally:
        receiver.close()

    run = Run.objects.get(id=run_id)
    assert run.trace_parent
    trace_id = run.trace_parent.split("-")[1]
    in_run = [s for s in receiver.spans if s["trace"] == trace_id]
    names = defaultdict(list)
    for span in in_run:
        names[span["name"]].append(span)
    assert len(names["run.start"]) == 1 and names["run.start"][0]["process"] == "web"
    http = [s for s in in_run if s["process"] == "web" and s["id"] == names["run.start"][0]["parent"]]
    assert http, "run.start is a child of the API request's span (Django instrumentation)"
    advances = names["run.advance"]
    assert len(advances) >= 2 and {s["process"] for s in advances} == {"worker"}  # the first task and the resume
    assert all(s["parent"] == names["run.start"][0]["id"] for s in advances)
    assert names["run.step"] and names["model.call"]
    tools = sorted(s["attributes"]["airlock.tool"].string_value for s in names["tool.call"])
    assert tools == ["orders.get_order_status", "orders.get_order_status", "orders.refund_order"]
    assert [s["attributes"]["airlock.tool"].string_value for s in names["tool.held"]] == ["orders.refund_order"]
    wait = names["approval.wait"]
    assert len(wait) == 1 and wait[0]["process"] == "web" and wait[0]["end"] > wait[0]["start"]
    assert wait[0]["attributes"]["airlock.decision"].string_value == "approved"
    refund = next(s for s in names["tool.call"]
                  if s["attributes"]["airlock.tool"].string_value == "orders.refund_order")
    assert refund["start"] >= wait[0]["end"]  # the approved call ran after the decision, in the same trace
    every = " ".join(str(s["attributes"]) for s in in_run)
    assert "A-1001" not in every and "refund-A-1001" not in every  # no arguments or results in spans
