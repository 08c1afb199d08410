"""A person cancels a gateway session's run (the run page's Cancel, `POST /api/v1/runs/{id}/cancel`): the run ends
`cancelled` with the calls it had, and the host's later calls go to a new session's run, never on into the one a
person cancelled. On Postgres the gateway hears the cancel (migration gateway/0004) and checks the session before
its next call; elsewhere its maintenance asks about every held session at each poll."""

from __future__ import annotations

import time

import pytest

from apps.gateway.models import GatewaySession
from apps.runs.models import Run, ToolCall
from tests.gateway.conftest import mcp_client, wait_for_ledgers, wait_until
from tests.processes import gateway_server, run_async

pytestmark = pytest.mark.django_db(transaction=True)
READ = ("orders.get_order_status", {"order_id": "A-1001"})
HEARD_WITHIN_S = 1.0


@pytest.fixture(scope="module")
def unpolled_gateway_url(django_db_setup, process_logs):
    """A gateway whose maintenance is an hour away: what it learns of a cancel, it learns by hearing it."""
    with gateway_server(process_logs, AIRLOCK_GATEWAY_POLL_S="3600") as (url, _):
        yield url
    wait_for_ledgers(url)


def calls_across_a_cancel(url: str, raw: str, cancel, *, until_s: float) -> tuple[str, float]:
    """Reads on one host session; after two, `cancel(run_id)` of the session's run, then reads until the
    gateway has opened another session for the host (or `until_s` passed). Returns (the cancelled run's id,
    seconds from the cancel's commit to the first call in the new run)."""

    async def reads() -> tuple[str, float]:
        async with mcp_client(url, raw) as client:
            for _ in range(2):
                assert not (await client.call_tool(*READ)).is_error
            first = await _session_run()
            assert first is not None
            cancel(first)
            cancelled = time.monotonic()
            while time.monotonic() < cancelled + until_s:
                assert not (await client.call_tool(*READ)).is_error
                if await _session_run() not in (first, None):
                    return first, time.monotonic() - cancelled
        raise AssertionError(f"the host's calls still went to the cancelled run {until_s} s after its cancel")

    return run_async(reads())


async def _session_run() -> str | None:
    """The run of the host's open session; None between one ending and the next call opening another."""
    from asgiref.sync import sync_to_async

    run_id = await sync_to_async(lambda: GatewaySession.objects.filter(ended_at__isnull=True)
                                 .values_list("run_id", flat=True).first())()
    return str(run_id) if run_id else None


def cancel_through_the_api(setup):
    def cancel(run_id: str) -> None:
        response = setup.admin_api.post(f"/api/v1/runs/{run_id}/cancel")
        assert response.status_code == 200, response.content
    return cancel


def test_a_cancelled_session_ends_and_the_hosts_next_calls_go_to_a_new_run(gateway_url, setup):
    raw = setup.create_key()["value"]
    cancelled, _ = calls_across_a_cancel(gateway_url, raw, cancel_through_the_api(setup), until_s=10)
    wait_for_ledgers(gateway_url)
    run = wait_until(lambda: Run.objects.filter(id=cancelled, status="cancelled").first(), timeout=10)
    assert "A person cancelled this gateway session." in run.error
    assert ToolCall.objects.filter(run_id=cancelled).count() >= 2  # what it had stays in its books
    session = GatewaySession.objects.get(run_id=cancelled)
    assert session.ended_at is not None
    current = GatewaySession.objects.get(ended_at__isnull=True)
    assert ToolCall.objects.filter(run_id=current.run_id).count() >= 1
    assert Run.objects.get(id=current.run_id).status == "running"


@pytest.mark.stack
def test_a_cancel_is_heard_before_the_next_call_without_waiting_for_maintenance(unpolled_gateway_url, setup):
    """With no maintenance to ask, the first call after the cancel is heard goes to a new run: no more of the
    host's calls are recorded in the cancelled one. Before the gateway heard cancels, every call went on into it."""
    raw = setup.create_key()["value"]
    cancelled, seconds = calls_across_a_cancel(unpolled_gateway_url, raw, cancel_through_the_api(setup),
                                               until_s=5)
    assert seconds < HEARD_WITHIN_S
    wait_for_ledgers(unpolled_gateway_url)
    run = Run.objects.get(id=cancelled)
    assert run.status == "cancelled"
    assert ToolCall.objects.filter(run_id=cancelled).count() == 2  # the two before the cancel, nothing after
