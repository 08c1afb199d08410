"""Logs as a log pipeline reads them: one JSON object per line from a real web process, carrying the
request id (the proxy's, or a new one returned to the client), with credential shapes masked; and the
context interfaces bind (org, actor, run) on every line written inside it."""

from __future__ import annotations

import io
import json
import logging

import pytest
import requests

from apps.audit.log_format import JsonFormatter
from apps.core import log_context
from tests.processes import web_server

pytestmark = pytest.mark.django_db(transaction=True)


def json_lines(text: str) -> list[dict]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))  # a line that starts like JSON must be JSON
    return lines


def test_a_web_process_logs_one_json_object_per_line_with_the_request_id(tmp_path):
    secret = "sk_live_" + "Q" * 30
    with web_server(tmp_path, AIRLOCK_LOG_FORMAT="json") as url:
        given = requests.get(f"{url}/no-such-page-{secret}", headers={"X-Request-ID": "proxy-req-12345678"}, timeout=30)
        assert given.status_code == 404
        assert given.headers["X-Request-ID"] == "proxy-req-12345678"
        made = requests.get(f"{url}/another-missing-page", timeout=30)
        assert len(made.headers["X-Request-ID"]) == 32  # none given: Airlock makes one
        bogus = requests.get(f"{url}/third-missing", headers={"X-Request-ID": "<script>"}, timeout=30)
        assert bogus.headers["X-Request-ID"] != "<script>"
    log = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert secret not in log
    lines = json_lines(log)
    assert lines, log[-2000:]
    not_found = [line for line in lines if "no-such-page" in line["message"]]
    assert not_found, log[-2000:]
    line = not_found[0]
    assert line["request_id"] == "proxy-req-12345678"
    assert line["level"] == "WARNING" and line["logger"] == "django.request"
    assert line["ts"].endswith("Z") and isinstance(line["process"], int)
    assert any(line.get("request_id") == made.headers["X-Request-ID"] for line in lines)


def test_bound_context_and_masked_tracebacks_in_each_line():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("airlock.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with log_context.bind(request_id="r1", org="o1"):
            with log_context.bind(run_id="run-9", tool_call_id=None):
                logger.warning("calling with Bearer abcdefghijklmnopqrstuvwxyz0123")
            try:
                raise ValueError("token=ghp_" + "a" * 36)
            except ValueError:
                logger.exception("failed")
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["run_id"] == "run-9" and first["org"] == "o1" and first["request_id"] == "r1"
    assert "tool_call_id" not in first  # None is left out
    assert "abcdefghijklmnopqrstuvwxyz0123" not in first["message"]
    assert "run_id" not in second and "ghp_" + "a" * 36 not in second["exception"]
    assert "ValueError" in second["exception"]
    assert "request_id" not in third  # the block's end restores the context
