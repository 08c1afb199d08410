"""Every call through the gateway is recorded (ledger row, run event, audit row), even when the
gateway stops right after answering, or its writer process dies on the way."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from apps.audit.models import AuditEvent
from apps.runs.models import RunEvent, ToolCall
from tests.gateway.conftest import mcp_client, wait_until
from tests.processes import gateway_server, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def _writers(gateway_pid: int) -> list[int]:
    """The gateway's ledger writer processes (its children running apps.gateway.ledger_process)."""
    found = []
    for task in Path(f"/proc/{gateway_pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"apps.gateway.ledger_process" in cmdline:
                found.append(int(pid))
    return found


def _calls(url: str, key: str, count: int, first: int = 0) -> None:
    async def scenario():
        async with mcp_client(url, key) as client:
            for i in range(first, first + count):
                await client.call_tool("orders.get_order_status", {"order_id": f"A-{1000 + i}"})  # some unknown

    run_async(scenario())


def _recorded(org) -> tuple[int, int, int]:
    return (ToolCall.objects.filter(org=org, qualified_name="orders.get_order_status").count(),
            RunEvent.objects.filter(run__org=org, type="tool.completed").count(),
            AuditEvent.objects.filter(org=org, action="gateway.tool_call").count())


def test_a_gateway_stopped_right_after_its_calls_has_recorded_every_one(setup, process_logs):
    key = setup.create_key()["value"]
    with gateway_server(process_logs) as (url, proc):
        _calls(url, key, 30)
        writers = wait_until(lambda: _writers(proc.pid))
    # The stop (SIGTERM) came well within a batch's collection time: nothing was committed by
    # waiting, the graceful stop did it, and the writer process is gone with its gateway.
    assert _recorded(setup.org) == (30, 30, 30)
    assert not any(Path(f"/proc/{pid}").exists() and b"ledger_process" in Path(f"/proc/{pid}/cmdline").read_bytes()
                   for pid in writers)


def test_a_writer_that_dies_is_replaced_and_no_call_is_lost_or_written_twice(setup, process_logs):
    key = setup.create_key()["value"]
    with gateway_server(process_logs) as (url, proc):
        _calls(url, key, 10)
        first = wait_until(lambda: _writers(proc.pid))
        wait_until(lambda: _recorded(setup.org) == (10, 10, 10))
        _calls(url, key, 10, first=10)
        for pid in first:
            os.kill(pid, signal.SIGKILL)  # dies with (or before) the second batch
        _calls(url, key, 10, first=20)
        wait_until(lambda: _recorded(setup.org) == (30, 30, 30))
        assert set(_writers(proc.pid)).isdisjoint(first)
    assert _recorded(setup.org) == (30, 30, 30)
    calls = ToolCall.objects.filter(org=setup.org).values_list("arguments", flat=True)
    assert sorted(c["order_id"] for c in calls) == [f"A-{1000 + i}" for i in range(30)]
