"""A call that may act has its key's standing checked on every request, open sessions included: right after
a revoke, or after the key's creator is demoted or removed, the next such call on an already-open MCP session is
refused with the reason, and the write it carried never reaches the server. (A read may be answered from memory
until the change is heard: test_heard_keys.)"""

from __future__ import annotations

import json

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from apps.accounts import services as account_services
from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.gateway import services as gateway_services
from apps.runs.models import ToolCall
from tests.factories import add_member
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
TRIALS = 15
WRITE_GRANTS = [{"tool": "orders.get_order_status", "policy": "auto"},
                {"tool": "orders.refund_order", "policy": "auto"}]


def refunds(setup) -> dict:
    return json.loads(setup.data.read_text()).get("refunds", {}) if setup.data.exists() else {}


def revoke(setup, creator, key):
    gateway_services.revoke_key(actor=member_actor(creator), key_id=key.id)


def demote(setup, creator, key):
    account_services.change_role(actor=setup.actor, member_id=creator.id, role="viewer")


def remove(setup, creator, key):
    account_services.remove_member(actor=setup.actor, member_id=creator.id)


@pytest.mark.parametrize(("change", "reason"), [
    (revoke, "was revoked"),
    (demote, "is now a viewer and may no longer manage gateway keys"),
    (remove, "is no longer in the organisation"),
])
def test_the_next_call_on_an_open_session_is_refused_with_the_reason(gateway_url, setup, change, reason):
    agent = agent_services.create_agent(actor=setup.actor, name="Refunds via gateway",
                                        connection_id=setup.agent.connection_id, script=[], grants=WRITE_GRANTS)
    refused = []

    async def trial(number: int) -> None:
        creator = add_member(setup.org, "admin")
        key, raw = gateway_services.create_key(actor=member_actor(creator), name=f"host {number}", agent_id=agent.id)
        answers: list[tuple[str, int, bytes]] = []

        async def note(response):
            answers.append((response.request.method, response.status_code, await response.aread()))

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {raw}"}, timeout=httpx2.Timeout(30),
                                  event_hooks={"response": [note]})
        async with Client(streamable_http_client(gateway_url, http_client=http), mode="legacy") as client:
            first = await client.call_tool("orders.get_order_status", {"order_id": "A-1001"})
            assert not first.is_error
            change(setup, creator, key)
            before = len(answers)
            with pytest.raises(BaseException):  # the SDK reports an HTTP 401 as a generic error
                await client.call_tool("orders.refund_order", {"order_id": "A-1003", "amount_cents": 700,
                                                               "request_id": f"refund-{number}"})
        method, status, body = answers[before]  # the answer to the refund's POST
        assert method == "POST"
        refused.append((status, json.loads(body).get("error_description", body)))

    for number in range(TRIALS):
        run_async(trial(number))
    assert len(refused) == TRIALS
    assert all(status == 401 and reason in text for status, text in refused), refused
    assert refunds(setup) == {}
    assert not ToolCall.objects.filter(qualified_name="orders.refund_order").exists()
