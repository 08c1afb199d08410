"""The gateway rides out a database outage: every connection it holds is cut (as a Postgres
restart cuts them) and new ones are refused for longer than three of the ledger's tries. The
open MCP session works again within seconds of the database's return, no call is lost or done
twice (the order desk's refunds are counted), and the ledger batch that could not be written
during the outage lands, once.

The outage is made on this test session's own database only (`ALLOW_CONNECTIONS false` and
`pg_terminate_backend` of its other backends), never by restarting the shared server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from contextlib import contextmanager
from urllib.parse import urlparse, urlunparse

import anyio
import httpx2
import psycopg
import pytest
from django.db import connection

from apps.agents import services as agent_services
from apps.audit.models import AuditEvent
from apps.runs.models import RunEvent, ToolCall
from tests.gateway.conftest import mcp_client, wait_until
from tests.gateway.test_ledger import _writers
from tests.processes import gateway_server, run_async, test_database_url

pytestmark = pytest.mark.django_db(transaction=True)
GRANTS = [{"tool": "orders.get_order_status", "policy": "auto"}, {"tool": "orders.refund_order", "policy": "auto"}]
OUTAGE_S = 3.0  # the ledger's first four tries come 0.2 + 0.4 + 0.8 + 1.6 s apart
RECOVERY_S = 5.0


@contextmanager
def database_outage(*, spare: int):
    """Cuts every other connection to this session's test database and refuses new ones until the
    block ends (what clients see of a Postgres restart, for this database only). This thread's
    connection and `spare` (the test's main thread's backend) stay, for looking and teardown."""
    name, own = connection.settings_dict["NAME"], _own_backend()
    admin = urlunparse(urlparse(test_database_url())._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                         "AND pid <> pg_backend_pid() AND pid <> ALL(%s)", [name, [own, spare]])
            yield
        finally:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def _own_backend() -> int:
    with connection.cursor() as cursor:  # this thread's connection stays, to look during the outage
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def refunds(setup) -> dict:
    return json.loads(setup.data.read_text()).get("refunds", {}) if setup.data.exists() else {}


def ledger_idle(url: str) -> bool:
    return bool(httpx2.get(url.removesuffix("/mcp") + "/healthz", timeout=5).json().get("ledger_idle"))


def test_an_open_session_works_again_within_seconds_of_an_outage_and_no_call_is_lost(setup, process_logs):
    agent = agent_services.create_agent(actor=setup.actor, name="Refunds via gateway",
                                        connection_id=setup.agent.connection_id, script=[], grants=GRANTS)
    key = setup.create_key(agent=agent)["value"]

    def refund(client, number: int):
        return client.call_tool("orders.refund_order", {"order_id": "A-1003", "amount_cents": 1,
                                                        "request_id": f"refund-{number}"})

    main_backend = _own_backend()
    with gateway_server(process_logs) as (url, _):
        async def scenario() -> tuple[float, list]:
            async with mcp_client(url, key, mode="legacy") as client:
                results = [await refund(client, n) for n in range(5)]  # every worker thread holds a connection
                while not ledger_idle(url):
                    await anyio.sleep(0.05)
                read = await client.call_tool("orders.get_order_status", {"order_id": "A-1001"})
                assert not read.is_error
                with database_outage(spare=main_backend):  # within the read's batch's collection time: its flush fails
                    await anyio.sleep(OUTAGE_S)
                    assert not ToolCall.objects.filter(qualified_name="orders.get_order_status").exists()
                back = time.monotonic()
                results.append(await refund(client, 5))
                recovered = time.monotonic() - back
                results += [await refund(client, n) for n in range(6, 15)]
                return recovered, results

        recovered, results = run_async(scenario())
        assert recovered < RECOVERY_S
        assert [r.is_error for r in results] == [False] * 15
        wait_until(lambda: ledger_idle(url), timeout=30)
    assert "not stored yet (attempt 4" in (process_logs / f"gateway-{urlparse(url).port}.log").read_text()
    assert sorted(refunds(setup)) == sorted(f"refund-{n}" for n in range(15))  # each refund done once
    calls = ToolCall.objects.filter(org=setup.org)
    assert calls.filter(qualified_name="orders.refund_order", state="succeeded").count() == 15
    assert calls.filter(qualified_name="orders.get_order_status", state="succeeded").count() == 1
    assert calls.count() == 16
    assert RunEvent.objects.filter(run__org=setup.org, type="tool.completed").count() == 16
    assert AuditEvent.objects.filter(org=setup.org, action="gateway.tool_call").count() == 16


def test_a_batch_kept_through_a_crash_during_an_outage_is_stored_once_by_the_next_gateway(setup, process_logs):
    key = setup.create_key()["value"]
    main_backend = _own_backend()
    with gateway_server(process_logs) as (url, proc):
        async def scenario() -> None:
            async with mcp_client(url, key, mode="legacy") as client:
                for n in range(3):
                    await client.call_tool("orders.get_order_status", {"order_id": f"A-100{n}"})
                with database_outage(spare=main_backend):
                    await anyio.sleep(1.5)  # the batch is with the writer, which waits for the database
                    for pid in [*_writers(proc.pid), proc.pid]:  # the machine goes down: no graceful stop
                        os.kill(pid, signal.SIGKILL)
                    assert ToolCall.objects.filter(org=setup.org).count() == 0

        with contextlib.suppress(httpx2.HTTPError, ExceptionGroup):  # the session dies with its gateway
            run_async(scenario())
        proc.wait(10)
    with gateway_server(process_logs) as (url, _):
        wait_until(lambda: ToolCall.objects.filter(org=setup.org).count() == 3, timeout=30)
        wait_until(lambda: ledger_idle(url), timeout=30)
    calls = ToolCall.objects.filter(org=setup.org)
    assert sorted(c["order_id"] for c in calls.values_list("arguments", flat=True)) == ["A-1000", "A-1001", "A-1002"]
    assert RunEvent.objects.filter(run__org=setup.org, type="tool.completed").count() == 3
    assert AuditEvent.objects.filter(org=setup.org, action="gateway.tool_call").count() == 3
