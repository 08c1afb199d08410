"""A run's model calls go through the egress guard at connect time: a connection whose base URL was
saved while private addresses were allowed (or whose name now resolves inward) fails the run with
the guard's reason, without retrying and without a single connection to the address."""

from __future__ import annotations

import pytest
from django.test import override_settings

from apps.agents import services as agent_services
from apps.runs import services, worker
from apps.runs.models import RunEvent
from tests.security.test_ssrf import Listener

pytestmark = pytest.mark.django_db


@pytest.fixture
def listener():
    item = Listener()
    yield item
    item.close()


@pytest.mark.parametrize(("provider", "base_url"), [
    ("openai_compatible", "http://127.0.0.1:{port}/v1"),
    ("openai_compatible", "http://localhost.:{port}/v1"),
    ("anthropic", "http://[::ffff:127.0.0.1]:{port}"),
])
def test_a_run_refuses_a_model_base_url_the_guard_blocks(desk, actor, listener, provider, base_url):
    connection = agent_services.create_connection(actor=actor, name="Inside", provider=provider,
                                                  base_url=base_url.format(port=listener.port), api_key="sk-test-1")
    agent = agent_services.create_agent(actor=actor, name="Looker", connection_id=connection.id, model="m",
                                        grants=[{"tool": "orders.get_order_status", "policy": "auto"}])
    crew = desk.sequential("Inside", [("look", agent, "Look at {order_id}.", [])])
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        run = services.start_run(actor=actor, crew_id=crew.id, inputs={"order_id": "A-1003", "amount_cents": 1},
                                 enqueue=False)
        run = worker.drive_run(run_id=run.id)
    assert run.status == "failed", run.status
    assert "blocked" in run.error and "AIRLOCK_EGRESS_ALLOW" in run.error, run.error
    assert not RunEvent.objects.filter(run=run, type="retry").exists()  # a refusal is not retried
    assert listener.connections == 0
