"""Requests of one key arriving together share a key check, and none that may act is answered by a query
sent before it arrived: a key revoked before a request arrived refuses that request, however many sessions
of the key are calling at the time. A read may be answered from memory (keys.HeardKeys) until the revoke's
notice arrives, a millisecond or so after its commit."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from apps.accounts.actors import member_actor
from apps.gateway import services as gateway_services
from apps.gateway.keys import KeyChecks
from tests.factories import add_member
from tests.gateway.conftest import mcp_client
from tests.processes import run_async


def test_a_request_arriving_during_a_query_is_answered_by_the_next_one():
    """The database's answer changes while a query is on its way: requests that arrived after it was sent
    see the change; requests that arrived together share one query."""
    state = {"standing": "valid", "queries": 0}

    async def scenario():
        query_sent, release = asyncio.Event(), asyncio.Event()

        async def check(bearer: str) -> str:
            state["queries"] += 1
            seen = state["standing"]  # what the database says when the query is sent
            query_sent.set()
            await release.wait()
            return seen

        checks = KeyChecks(check)
        first = asyncio.create_task(checks.standing("agw_x"))
        await query_sent.wait()
        state["standing"] = "revoked"  # committed after the first query was sent
        later = [asyncio.create_task(checks.standing("agw_x")) for _ in range(20)]
        await asyncio.sleep(0)
        release.set()
        return await first, await asyncio.gather(*later)

    first, later = run_async(scenario())
    assert first == "valid"
    assert later == ["revoked"] * 20
    assert state["queries"] == 2


def test_an_error_reaches_every_request_sharing_the_query():
    async def check(bearer: str) -> str:
        await asyncio.sleep(0.01)
        raise ConnectionError("the database does not answer")

    async def scenario():
        checks = KeyChecks(check)
        return await asyncio.gather(*(checks.standing("agw_x") for _ in range(5)), return_exceptions=True)

    assert all(isinstance(answer, ConnectionError) for answer in run_async(scenario()))


WRITE = ("orders.refund_order", {"order_id": "A-1003", "amount_cents": 1, "request_id": "busy-host"})
READ = ("orders.get_order_status", {"order_id": "A-1001"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("call", "grace"), [(WRITE, 0.0), (READ, 0.25)], ids=["write", "read"])
def test_no_call_sent_after_a_revoke_gets_through_while_many_sessions_call(gateway_url, setup, call, grace):
    """A write sent after the revoke committed is refused; a read too once `grace` has passed (the notice's way:
    the gateway would otherwise answer the key from memory for `keys.REREAD_S`, ten seconds)."""
    from apps.agents import services as agent_services

    tool, arguments = call
    creator = add_member(setup.org, "admin")
    agent = agent_services.create_agent(actor=setup.actor, name="Busy host", connection_id=setup.agent.connection_id,
                                        script=[], grants=[{"tool": tool, "policy": "auto"}])
    key, raw = gateway_services.create_key(actor=member_actor(creator), name="busy host", agent_id=agent.id,
                                           rate_limit_per_minute=100_000)
    calling, revoking, revoked_at = threading.Event(), [], []
    answers: list[tuple[float, float, bool]] = []  # (when the call was sent, when answered, answered ok)
    sessions = 12

    def revoke_while_they_call() -> None:
        try:
            if calling.wait(60):
                time.sleep(0.5)
                revoking.append(time.monotonic())
                gateway_services.revoke_key(actor=member_actor(creator), key_id=key.id)
                revoked_at.append(time.monotonic())  # committed: every call sent from now on must be refused
        finally:
            connection.close()

    give_up = time.monotonic() + 60
    opened = []

    async def session() -> None:
        async with mcp_client(gateway_url, raw, timeout=30) as client:
            assert not (await client.call_tool(tool, arguments)).is_error
            opened.append(1)
            if len(opened) == sessions:
                calling.set()
            while (not revoked_at or time.monotonic() < revoked_at[0] + grace + 1.0) and time.monotonic() < give_up:
                sent = time.monotonic()
                try:
                    ok = not (await client.call_tool(tool, arguments)).is_error
                except Exception:  # the SDK reports the HTTP 401 as an error
                    ok = False
                answers.append((sent, time.monotonic(), ok))

    async def calls() -> None:
        await asyncio.gather(*(session() for _ in range(sessions)))

    revoker = threading.Thread(target=revoke_while_they_call)
    revoker.start()
    run_async(calls())
    revoker.join()
    # A call started just before the revoke may reach the gateway after it committed (twelve sessions share one
    # event loop here): refusing it is right. What must hold: calls answered before the revoke began worked,
    # and no call started after it committed (and `grace`) got through.
    before = [ok for sent, answered, ok in answers if answered < revoking[0]]
    after = [ok for sent, answered, ok in answers if sent > revoked_at[0] + grace]
    assert before and all(before)  # the key worked, from many sessions at once
    assert after and not any(after)


@pytest.mark.django_db
def test_the_compiled_key_query_judges_every_key_as_the_selector_does(org, owner):
    """The gateway's key check (a statement compiled once) and its plain twin (the selector that builds the
    query on every call) give the same standing: a working key, a revoked one, one whose creator was demoted or
    removed, an unknown key and a value that is not a key."""
    from apps.accounts import services as account_services
    from apps.agents import services as agent_services
    from apps.gateway import selectors
    from apps.gateway.keys import KeyStatement

    owner_actor = member_actor(owner)
    connection_ = agent_services.create_connection(actor=owner_actor, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(actor=owner_actor, name="Host", connection_id=connection_.id, script=[])
    raws = {}
    for name in ("working", "revoked", "demoted", "removed"):
        creator = add_member(org, "admin")
        key, raws[name] = gateway_services.create_key(actor=member_actor(creator), name=name, agent_id=agent.id)
        if name == "revoked":
            gateway_services.revoke_key(actor=owner_actor, key_id=key.id)
        elif name == "demoted":
            account_services.change_role(actor=owner_actor, member_id=creator.id, role="viewer")
        elif name == "removed":
            account_services.remove_member(actor=owner_actor, member_id=creator.id)
    raws["unknown"] = "agw_" + "x" * 40
    raws["not a key"] = "Bearer-ish nonsense"
    compiled = KeyStatement(resource="")
    standings = {name: compiled(raw) for name, raw in raws.items()}
    assert standings == {name: selectors.bearer_standing(raw) for name, raw in raws.items()}
    assert standings["working"].key is not None and standings["working"].key.name == "working"
    assert [name for name, standing in standings.items() if standing.key is None] == [
        "revoked", "demoted", "removed", "unknown", "not a key"]
