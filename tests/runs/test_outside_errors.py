"""Errors that came from outside are stored without the organisation's secrets: a provider's 401 that
quotes the key it received, an MCP server's error result and JSON-RPC error that quote its environment.
The run row, its events, its trace, the notification (the webhook body) and the ledger hold none of them."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

import pytest

from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.notifications.models import Notification
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs import services, worker
from apps.runs.history import run_trace
from apps.runs.messages import turn_messages
from apps.runs.models import Run, RunEvent, ToolCall
from tests.agents.fake_llm import FakeLLM

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
ECHO = ROOT / "tests" / "security" / "servers" / "echo_secrets.py"


def everything_stored(run: Run) -> str:
    """Every place a run's error text lands, as text."""
    run.refresh_from_db()
    rows = [run.error, *RunEvent.objects.filter(run=run).values_list("data", flat=True),
            *ToolCall.objects.filter(run=run).values_list("error", "result"),
            *Notification.objects.filter(org_id=run.org_id).values_list("payload", flat=True), run_trace(run)]
    return json.dumps(rows, default=str)


@pytest.fixture
def key():
    return f"sk-proj-{secrets.token_hex(12)}"


@pytest.fixture
def hook(actor):
    from apps.notifications import services as notifications

    notifications.create_webhook(actor=actor, name="All runs", url="http://127.0.0.1:9/hook", events=["run.finished"])


@pytest.fixture
def echo_server(actor):
    """The echo server and the secret in its environment that it quotes back."""
    other = f"cnry-{secrets.token_hex(8)}+{secrets.token_hex(4)}/z"
    server = registry_services.create_server(actor=actor, name="echo", transport="stdio", trust_tier="internal",
                                             command=sys.executable, args=[str(ECHO)], cwd=str(ROOT),
                                             env={"ECHO_SECRET": other}, sync=False)
    assert registry_services.sync_server(actor=actor, server_id=server.id, review=inbox).status == "ok"
    yield other
    pool.close_all()


def test_a_provider_401_that_quotes_the_key_leaves_it_nowhere(desk, actor, key, hook):
    with FakeLLM("openai") as fake:
        fake.replies = [(500, {"error": {"message": f"upstream overloaded for key {key}"}}),
                        (401, {"error": {"message": f"Incorrect API key provided: {key}. You can find your API key "
                                                    "at https://platform.openai.com/account/api-keys."}})]
        connection = agent_services.create_connection(actor=actor, name="Echoing provider",
                                                      provider="openai_compatible", base_url=fake.base_url,
                                                      api_key=key)
        agent = agent_services.create_agent(actor=actor, name="Clerk", connection_id=connection.id, model="gpt-4o")
        crew = desk.sequential("Echo", [("look", agent, "Look at {order_id}.", [])])
        run = worker.drive_run(run_id=services.start_run(actor=actor, crew_id=crew.id, enqueue=False,
                                                           inputs={"order_id": "A-1", "amount_cents": 1}).id)
    assert len(fake.requests) == 2 and fake.requests[0]["headers"]["authorization"] == f"Bearer {key}"
    assert run.status == "failed"
    assert "Incorrect API key provided: [redacted]" in run.error  # still says what is wrong
    assert RunEvent.objects.filter(run=run, type="retry").exists()
    assert Notification.objects.filter(org_id=run.org_id, event="run.finished").exists()
    assert key not in everything_stored(run)


def test_an_mcp_server_that_quotes_its_secret_in_errors_leaves_it_nowhere(desk, actor, echo_server, hook):
    agent = desk.agent("Echo reader", [{"call": [{"tool": "echo.report", "args": {}}]},
                                       {"call": [{"tool": "echo.sync", "args": {}}]},
                                       {"say": "Done.\nSTATUS: done\nREASON: tried"}],
                       [{"tool": "echo.report", "policy": "auto"}, {"tool": "echo.sync", "policy": "auto"}])
    crew = desk.sequential("Echo tools", [("read", agent, "Read {order_id}.", [])])
    run = worker.drive_run(run_id=services.start_run(actor=actor, crew_id=crew.id, enqueue=False,
                                                       inputs={"order_id": "A-1", "amount_cents": 1}).id)
    calls = {c.qualified_name: c for c in ToolCall.objects.filter(run=run)}
    assert calls["echo.report"].state == "failed" and calls["echo.sync"].state == "failed"
    assert "upstream refused key [redacted]" in calls["echo.report"].error
    assert "upstream refused key [redacted]" in calls["echo.report"].result["text"]
    assert "sync failed" in calls["echo.sync"].error
    stored = everything_stored(run)
    assert echo_server not in stored
    for turn in run.steps.all():  # nor what the model was told
        assert echo_server not in json.dumps(turn_messages(turn))
