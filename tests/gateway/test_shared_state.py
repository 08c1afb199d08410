"""What gateway processes share: a key's rate limit (a Redis counter every process counts into),
and registry changes (a change saved by any process reaches the clients of every gateway
process, and a revoked key stops at once)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import anyio
import httpx2
import pytest
from django.conf import settings
from django.db import connection
from mcp import MCPError
from mcp.types import ToolListChangedNotification

from apps.approvals.definition_changes import inbox
from apps.gateway.ratelimit import LocalRateLimiter, RedisRateLimiter, rate_limiter
from apps.registry import services as registry_services
from apps.registry.models import Tool
from tests.gateway.conftest import mcp_client, wait_until
from tests.gateway.test_identity_and_failures import post
from tests.processes import RedisServer, free_port, run_async

ORDER = {"order_id": "A-1001"}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """The session's Redis, or (embedded mode) a private redis-server for the limiter itself."""
    if settings.REDIS_URL:
        yield settings.REDIS_URL
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def takes(url: str, prefix: str, key_id: str, rate: int, n: int, **kwargs) -> list[float]:
    """`n` calls through a limiter of its own (own event loop, own Redis connection, own memory)."""
    async def go():
        limiter = RedisRateLimiter(url, prefix=prefix)
        try:
            return [await limiter.take(key_id, rate, **kwargs) for _ in range(n)]
        finally:
            await limiter.close()

    return run_async(go())  # a loop of its own even where Playwright keeps one running in this thread


def mid_minute() -> float:
    """A moment in the middle of a minute that has not begun: the counts below are of one window, however
    slowly they run. On the wall clock a test that crosses a minute boundary rightly gets more calls, as the
    last minute starts to fade (CI, 7 December: 11 allowed, not 10)."""
    return (int(time.time()) // 60 + 10) * 60 + 30


def test_limiters_with_separate_state_share_one_counter_per_key(redis_url):
    prefix, key, now = f"test-{uuid.uuid4().hex}", str(uuid.uuid4()), mid_minute()
    with ThreadPoolExecutor(4) as threads:
        sides = [threads.submit(takes, redis_url, prefix, key, 10, 6, now=now) for _ in range(4)]
        waits = [w for side in sides for w in side.result()]
    assert sum(1 for w in waits if w == 0) == 10  # 24 calls from 4 limiters, 10 allowed in total
    assert all(1 <= w <= 120 for w in waits if w)
    # another key has its own counter
    assert takes(redis_url, prefix, str(uuid.uuid4()), 10, 1, now=now) == [0.0]


def test_busy_keys_are_claimed_in_blocks_and_never_exceed_the_rate(redis_url):
    prefix, key, now = f"test-{uuid.uuid4().hex}", str(uuid.uuid4()), mid_minute()
    with ThreadPoolExecutor(4) as threads:  # rate 500: blocks of 5 calls, one round trip per block
        sides = [threads.submit(takes, redis_url, prefix, key, 500, 150, now=now) for _ in range(4)]
        allowed = sum(1 for side in sides for w in side.result() if w == 0)
    assert 500 - 4 * 4 <= allowed <= 500  # at most a block (less the call that claimed it) early per limiter


def test_the_window_slides_over_the_minute_boundary_and_refusals_do_not_count(redis_url):
    prefix, key = f"test-{uuid.uuid4().hex}", str(uuid.uuid4())
    minute = (int(time.time()) // 60 + 10) * 60  # a boundary in the future: counters of its own
    # the third call waits into the next minute, until half of this one is forgotten
    assert takes(redis_url, prefix, key, 2, 3, now=minute - 1) == [0.0, 0.0, 31.0]
    # just past the boundary the last minute still counts almost fully: refused, not a fresh budget
    assert takes(redis_url, prefix, key, 2, 1, now=minute + 1) == [29.0]
    # half a minute on, half of the last minute's two calls are forgotten: exactly one more fits
    assert takes(redis_url, prefix, key, 2, 2, now=minute + 30) == [0.0, 30.0]
    assert takes(redis_url, prefix, key, 2, 1, now=minute + 61) == [0.0]


def test_an_unreachable_redis_falls_back_to_counting_in_the_process():
    limiter_waits = takes(f"redis://127.0.0.1:{free_port()}/0", "test", str(uuid.uuid4()), 2, 3)
    assert limiter_waits[:2] == [0.0, 0.0] and limiter_waits[2] > 0


@pytest.mark.django_db(transaction=True)
def test_two_gateway_processes_share_a_keys_rate_limit(gateway_url, other_gateway_url, setup):
    if not settings.REDIS_URL:  # embedded mode runs one gateway process: its own bucket is the limit
        assert isinstance(rate_limiter(), LocalRateLimiter)
        return
    key = setup.create_key(rate_limit_per_minute=3)["value"]

    async def outcome(client):
        try:
            return await client.call_tool("orders.get_order_status", ORDER)
        except MCPError as refused:  # over the rate: a JSON-RPC error (HTTP 429)
            return refused

    async def scenario():
        async with mcp_client(gateway_url, key) as one, mcp_client(other_gateway_url, key, mode="legacy") as two:
            return [await outcome(one), await outcome(two), await outcome(one), await outcome(two),
                    await outcome(one)]

    results = run_async(scenario())
    assert [isinstance(r, MCPError) for r in results] == [False, False, False, True, True]
    assert "allows 3 calls per minute" in results[3].message
    assert "Try again in" in results[4].message


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_quarantine_and_a_pin_made_elsewhere_reach_the_clients_of_another_gateway_process(
        other_gateway_url, setup, mode):
    key = setup.create_key()["value"]
    tool = Tool.objects.get(qualified_name="orders.list_orders")
    heard = []

    def change(**kwargs):
        try:
            if kwargs:
                registry_services.update_tool(actor=setup.actor, tool_id=tool.id, **kwargs, review=inbox)
            else:
                registry_services.pin_tool(actor=setup.actor, tool_id=tool.id, review=inbox)
        finally:
            connection.close()

    async def on_message(message):
        if isinstance(message, ToolListChangedNotification):
            heard.append(message)

    async def changed_and_heard(client, **kwargs):
        count = len(heard)
        if mode == "auto":  # 2026-07-28: notices only on a subscription
            async with client.listen(tools_list_changed=True) as subscription:
                await anyio.to_thread.run_sync(lambda: change(**kwargs))
                with anyio.fail_after(15):
                    async for event in subscription:
                        heard.append(event)
                        break
        else:
            await anyio.to_thread.run_sync(lambda: change(**kwargs))
            with anyio.fail_after(15):
                while len(heard) == count:
                    await anyio.sleep(0.05)
        return {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}

    async def scenario():
        async with mcp_client(other_gateway_url, key, mode=mode, message_handler=on_message) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            quarantined = await changed_and_heard(client, state="quarantined")
            refused = await client.call_tool("orders.list_orders", {})
            pinned = await changed_and_heard(client)
            return before, quarantined, refused, pinned

    before, quarantined, refused, pinned = run_async(scenario())
    assert before - quarantined == {"orders.list_orders"}
    assert refused.is_error and "quarantined" in refused.content[0].text.lower()
    assert pinned == before  # each change was heard within 15 s (fail_after), without any polling


@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_elsewhere_is_refused_by_every_gateway_process_at_once(gateway_url, other_gateway_url,
                                                                             setup):
    created = setup.create_key()
    for url in (gateway_url, other_gateway_url):
        assert post(url, created["value"]).status_code == 200
    assert setup.admin_api.delete(f"/api/v1/gateway-keys/{created['key']['id']}").status_code == 204
    for url in (gateway_url, other_gateway_url):  # identities are trusted for a minute without a notice
        assert wait_until(lambda u=url: post(u, created["value"]).status_code == 401, timeout=5)
    assert httpx2.get(other_gateway_url.replace("/mcp", "/healthz"), timeout=10).status_code == 200
