"""Hostile and broken MCP servers through registry.pool.call_tool (real stdio processes): a hang
times out without blocking the next call, megabyte answers and notification floods end in a clean
result or a clean error, and a server offering another server's tool names stays in its own
namespace. Rug pulls, poisoned definitions and the sandbox are held by tests/registry
(test_pins_and_scan.py, test_sandbox.py, test_failures.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from apps.accounts.actors import member_actor
from apps.approvals.definition_changes import inbox
from apps.registry import pool, selectors, services
from apps.registry.pool import ToolCallFailed, ToolCallTimeout

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = Path(__file__).resolve().parent / "servers" / "hostile.py"

pytestmark = pytest.mark.django_db


@pytest.fixture
def actor(owner):
    return member_actor(owner)


@pytest.fixture
def hostile(actor):
    server = services.create_server(actor=actor, name="hostile", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=[str(HOSTILE)], cwd=str(ROOT), sync=False,
                                    timeout_s=20)
    yield server
    pool.pool.close_all()


def test_a_hanging_tool_times_out_and_the_next_call_still_works(hostile):
    started = time.monotonic()
    with pytest.raises(ToolCallTimeout, match="within 2 s"):
        pool.call_tool(hostile.id, "hang", {}, timeout=2)
    assert time.monotonic() - started < 10
    assert pool.call_tool(hostile.id, "ping", {}, timeout=10).text == "pong"


def test_a_flood_of_notifications_does_not_stop_the_answer(hostile):
    result = pool.call_tool(hostile.id, "flood", {"count": 500}, timeout=30)
    assert result.text == "flooded 500"
    assert pool.call_tool(hostile.id, "ping", {}, timeout=10).text == "pong"


def test_a_huge_answer_is_a_clean_result_or_a_clean_error(hostile):
    try:
        result = pool.call_tool(hostile.id, "huge", {"megabytes": 4}, timeout=30)
    except ToolCallFailed as exc:
        assert "Traceback" not in str(exc) and len(str(exc)) < 2100
    else:
        assert not result.is_error and len(result.text) == 4 * 1024 * 1024
    assert pool.call_tool(hostile.id, "ping", {}, timeout=10).text == "pong"


def test_a_result_that_breaks_its_own_schema_is_a_clean_error(hostile):
    try:
        result = pool.call_tool(hostile.id, "bad_structured", {}, timeout=10)
    except ToolCallFailed as exc:
        assert "Traceback" not in str(exc)
    else:
        assert result.structured_content is None or isinstance(result.structured_content, dict)
    assert pool.call_tool(hostile.id, "ping", {}, timeout=10).text == "pong"


def test_shadowed_tool_names_stay_in_their_own_namespace(actor, hostile, tmp_path):
    orders = services.create_server(actor=actor, name="orders", transport="stdio", trust_tier="internal",
                                    command=sys.executable, args=["-m", "apps.demo.order_desk", "stdio"],
                                    env={"ORDER_DESK_DATA": str(tmp_path / "orders.json")}, cwd=str(ROOT), sync=False)
    assert services.sync_server(actor=actor, server_id=orders.id, review=inbox).status == "ok"
    assert services.sync_server(actor=actor, server_id=hostile.id, review=inbox).status == "ok"
    mine = selectors.get_tool_by_qualified_name(org_id=actor.org_id, qualified_name="orders.get_order_status")
    theirs = selectors.get_tool_by_qualified_name(org_id=actor.org_id, qualified_name="hostile.get_order_status")
    assert mine.server_id == orders.id and theirs.server_id == hostile.id and mine.id != theirs.id
    with pytest.raises(Exception, match="already exists"):
        services.create_server(actor=actor, name="orders", transport="stdio", trust_tier="third_party",
                               command="true", sync=False)
