"""A gateway process answers a key it found standing from memory only while it hears every change that could end
its standing (keys.HeardKeys): reads are refused, with the reason, as soon as a revoke, a demotion or a removal is
heard, and a listening session that is lost leaves no key answered from memory. (Calls that may act read their key
every time: test_key_standing, test_key_checks.)"""

from __future__ import annotations

import json
import time

import httpx2
import pytest
from django.db import connection
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from apps.accounts.actors import member_actor
from apps.gateway import services as gateway_services
from apps.gateway.keys import REREAD_S
from tests.factories import add_member
from tests.gateway.conftest import wait_until
from tests.gateway.test_key_standing import demote, remove, revoke
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
READ = ("orders.get_order_status", {"order_id": "A-1001"})
HEARD_WITHIN_S = 1.0  # far below REREAD_S: a change that was not heard would be answered from memory that long
assert HEARD_WITHIN_S < REREAD_S / 2


def keys_heard(gateway_url: str) -> bool:
    return httpx2.get(gateway_url.removesuffix("/mcp") + "/healthz").json()["keys_heard"]


def refused_after(gateway_url: str, raw: str, change) -> tuple[float, int, str]:
    """Reads on an open session until the key is refused, with `change` made after two reads worked: (seconds from
    the change's commit to the refusal, the refusal's HTTP status, its reason)."""
    answers: list[tuple[int, bytes]] = []

    async def note(response):
        answers.append((response.status_code, await response.aread()))

    async def reads() -> tuple[float, int, str]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {raw}"}, timeout=httpx2.Timeout(30),
                                  event_hooks={"response": [note]})
        async with Client(streamable_http_client(gateway_url, http_client=http), mode="legacy") as client:
            for _ in range(2):  # the second one from memory
                assert not (await client.call_tool(*READ)).is_error
            change()
            changed = time.monotonic()
            while time.monotonic() < changed + REREAD_S + 5:
                seen = len(answers)
                try:
                    assert not (await client.call_tool(*READ)).is_error
                except BaseException:  # the SDK reports an HTTP 401 as a generic error
                    status, body = answers[seen]
                    return time.monotonic() - changed, status, json.loads(body).get("error_description", "")
        raise AssertionError("the key was never refused")

    return run_async(reads())


@pytest.mark.parametrize(("change", "reason"), [
    (revoke, "was revoked"),
    (demote, "is now a viewer and may no longer manage gateway keys"),
    (remove, "is no longer in the organisation"),
])
def test_a_read_is_refused_with_the_reason_once_the_change_is_heard(gateway_url, setup, change, reason):
    assert wait_until(lambda: keys_heard(gateway_url), timeout=10)
    creator = add_member(setup.org, "admin")
    key, raw = gateway_services.create_key(actor=member_actor(creator), name="reader", agent_id=setup.agent.id)
    seconds, status, text = refused_after(gateway_url, raw, lambda: change(setup, creator, key))
    assert status == 401 and reason in text, text
    assert seconds < HEARD_WITHIN_S


def test_a_lost_listening_session_leaves_no_key_answered_from_memory(gateway, setup):
    """The session that hears key changes is killed (a Postgres restart, a failover, an admin's
    pg_terminate_backend), and a key is revoked before the gateway has listened again: the revoke's notice is lost
    with the session, so the gateway must notice the loss and read keys until it listens again, then hear again."""
    gateway_url, process = gateway
    assert wait_until(lambda: keys_heard(gateway_url), timeout=10)
    for attempt in range(2):
        creator = add_member(setup.org, "admin")
        key, raw = gateway_services.create_key(actor=member_actor(creator), name=f"reader {attempt}",
                                               agent_id=setup.agent.id)

        def kill_then_revoke() -> None:
            if attempt == 0:
                with connection.cursor() as cursor:
                    # This gateway's session only: another test's gateway may be listening on this database too.
                    cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                   "application_name = %s AND datname = current_database()",
                                   [f"airlock gateway keys {process.pid}"])
                    assert cursor.fetchone()[0] == 1  # the gateway's one listening session
            revoke(setup, creator, key)

        seconds, status, text = refused_after(gateway_url, raw, kill_then_revoke)
        assert status == 401 and "was revoked" in text, text
        assert seconds < HEARD_WITHIN_S
        assert wait_until(lambda: keys_heard(gateway_url), timeout=10)  # listening again, and heard on the next pass
