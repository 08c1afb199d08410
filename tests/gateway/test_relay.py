"""What the gateway passes between a host and a server behind it, in both protocol eras: progress and log
messages (to the host that asked, and no other), completions, resource subscriptions, and the server's
elicitation and sampling requests under the server's settings, recorded on the gateway session's run.

The server is tests/gateway/servers/relaying.py (SDK 2.x, stdio); the hosts are the official SDK client."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import anyio
import pytest
from django.db import connection
from django.test import Client as DjangoClient
from mcp import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import (
    CreateMessageResult,
    ElicitResult,
    PromptReference,
    ResourceTemplateReference,
    ResourceUpdatedNotification,
    TextContent,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.models import ApprovalRequest
from apps.registry import services as registry_services
from apps.registry.pool import pool
from apps.runs.models import RunEvent, ToolCall
from tests.conftest import signed_in
from tests.factories import token_for
from tests.gateway.conftest import ROOT, mcp_client, register_and_pin, wait_for_ledgers, wait_until
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)
ERAS = ["auto", "legacy"]  # auto negotiates 2026-07-28 with the gateway; legacy does the initialize handshake
SECRET = "relay-secret-4f1c9a"


@dataclass
class Relaying:
    org: object
    actor: object
    server: object
    key: str
    approver_api: DjangoClient

    def allow(self, **settings: bool) -> None:
        registry_services.set_server_requests(actor=self.actor, server_id=self.server.id, **settings)


@pytest.fixture
def relaying(gateway_url, org, owner):
    from apps.gateway import services as gateway_services

    actor = member_actor(owner)
    server = register_and_pin(actor, name="relaying", transport="stdio", trust_tier="internal",
                              command=sys.executable, args=["-m", "tests.gateway.servers.relaying"], cwd=str(ROOT),
                              env={"SECRET_VALUE": SECRET}, read=("steps", "ask", "summarise", "touch_note"))
    connection = agent_services.create_connection(actor=actor, name="Scripted", provider="scripted")
    agent = agent_services.create_agent(
        actor=actor, name="Relayed", connection_id=connection.id, script=[],
        grants=[{"tool": f"relaying.{t}", "policy": "auto"} for t in ("steps", "ask", "summarise", "touch_note")])
    _, key = gateway_services.create_key(actor=actor, name="Host", agent_id=agent.id)
    approver = DjangoClient(headers={"Authorization": f"Bearer {token_for(org, 'approver', name='approver')}"})
    yield Relaying(org, actor, server, key, approver)
    pool.close_all()
    wait_for_ledgers(gateway_url)


def text(result) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.mark.parametrize("mode", ERAS)
def test_progress_and_log_messages_reach_the_host_that_asked_for_them_and_no_other(gateway_url, relaying, mode):
    async def host(level: str | None):
        logs, progress = [], []

        async def on_log(params):
            logs.append(params)

        async def on_progress(value, total, message):
            progress.append((value, total, message))

        async with mcp_client(gateway_url, relaying.key, mode=mode, logging_callback=on_log,
                              log_level=level if mode == "auto" else None) as client:
            if level and mode == "legacy":
                await client.set_logging_level(level)
            result = await client.call_tool("relaying.steps", {}, progress_callback=on_progress)
            await client.call_tool("relaying.steps", {})  # log messages without progress too
            return client.protocol_version, result, logs, progress

    async def scenario():
        informed = await host("info")
        silent = await host(None)  # the same key, another host session: it asked for no log messages
        return informed, silent

    (era, result, logs, progress), (_, other, other_logs, _) = run_async(scenario())
    assert (era in MODERN_PROTOCOL_VERSIONS) == (mode == "auto")
    assert text(result) == "three steps done" and text(other) == "three steps done"
    assert [value for value, _, _ in progress] == [1, 2, 3] and progress[0][1:] == (3, "step 1 of 3")
    assert [(m.level, m.logger) for m in logs] == [("info", "steps"), ("warning", "steps")] * 2  # no debug
    assert SECRET not in str(logs[0].data) and "working with" in str(logs[0].data)
    assert other_logs == []


@pytest.mark.parametrize("mode", ERAS)
def test_completions_come_from_the_server_that_owns_the_prompt_or_the_template(gateway_url, relaying, mode):
    async def scenario():
        async with mcp_client(gateway_url, relaying.key, mode=mode) as client:
            declared = client.server_capabilities.completions is not None
            listed = await client.complete(PromptReference(type="ref/prompt", name="relaying.greeting"),
                                           {"name": "language", "value": "es"})
            own_name = await client.complete(PromptReference(type="ref/prompt", name="greeting"),
                                             {"name": "language", "value": "en"})
            template = await client.complete(
                ResourceTemplateReference(type="ref/resource", uri="city://{name}/weather"),
                {"name": "name", "value": "par"})
            try:
                await client.complete(PromptReference(type="ref/prompt", name="elsewhere.greeting"),
                                      {"name": "language", "value": "e"})
                unknown = None
            except MCPError as exc:
                unknown = exc
            return declared, listed, own_name, template, unknown

    declared, listed, own_name, template, unknown = run_async(scenario())
    assert declared
    assert listed.completion.values == ["esperanto", "estonian"]
    assert own_name.completion.values == ["english"]
    assert template.completion.values == ["paris", "parma"]
    assert unknown is not None and "Unknown prompt: elsewhere.greeting" in unknown.error.message


@pytest.mark.parametrize("mode", ERAS)
def test_a_subscription_to_a_readable_resource_hears_its_changes_until_it_ends(gateway_url, relaying, mode):
    async def handshake_era(client, heard):
        await client.subscribe_resource("note://today")
        await client.call_tool("relaying.touch_note", {"text": "second"})
        with anyio.fail_after(20):
            while not heard:
                await anyio.sleep(0.05)
        await client.unsubscribe_resource("note://today")
        await client.call_tool("relaying.touch_note", {"text": "third"})

    async def modern_era(client, heard):
        async with client.listen(resource_subscriptions=["note://today"]) as subscription:
            await client.call_tool("relaying.touch_note", {"text": "second"})
            with anyio.fail_after(20):
                async for event in subscription:  # the message handler hears it too
                    if isinstance(event, ResourceUpdated):
                        break
        await client.call_tool("relaying.touch_note", {"text": "third"})

    async def scenario():
        heard: list[str] = []

        async def on_message(message):
            if isinstance(message, ResourceUpdatedNotification):
                heard.append(str(message.params.uri))

        async with mcp_client(gateway_url, relaying.key, mode=mode, message_handler=on_message) as client:
            declared = client.server_capabilities.resources.subscribe
            await (modern_era if client.protocol_version in MODERN_PROTOCOL_VERSIONS else handshake_era)(client,
                                                                                                          heard)
            await anyio.sleep(1)  # a notice after the subscription ended would arrive by now
            note = await client.read_resource("note://today")
            try:
                if mode == "legacy":
                    await client.subscribe_resource("file:///etc/passwd")
                else:
                    async with client.listen(resource_subscriptions=["file:///etc/passwd"]):
                        pass
                refused = None
            except MCPError as exc:
                refused = exc
            return declared, heard, note, refused

    declared, heard, note, refused = run_async(scenario())
    assert declared
    assert heard == ["note://today"]
    assert note.contents[0].text == "third"
    assert refused is not None and "Resource not found: file:///etc/passwd" in refused.error.message


def answering_host(asked: list):
    async def elicit(context, params):
        asked.append(("elicitation", params.message))
        return ElicitResult(action="accept", content={"answer": "blue"})

    async def sample(context, params):
        asked.append(("sampling", params.messages[0].content.text))
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="A short summary."),
                                   model="host-model-1", stop_reason="endTurn")

    return {"elicitation_callback": elicit, "sampling_callback": sample}


def relay_events(relaying) -> list[tuple[str, dict]]:
    calls = {str(c.id): c.qualified_name for c in ToolCall.objects.filter(org_id=relaying.org.id)}
    return [(e.type, {**e.data, "call": calls.get(e.data.get("tool_call_id"))})
            for e in RunEvent.objects.filter(run__org_id=relaying.org.id, type__regex=r"^(elicitation|sampling)\.")
            .order_by("at", "seq")]


@pytest.mark.parametrize("mode", ERAS)
def test_a_servers_questions_reach_a_host_that_declared_them_when_its_settings_allow(gateway_url, relaying, mode,
                                                                                    client, owner):
    relaying.allow(allow_elicitation=True, allow_sampling=True)
    asked: list = []

    async def scenario():
        async with mcp_client(gateway_url, relaying.key, mode=mode, **answering_host(asked)) as client:
            return (await client.call_tool("relaying.ask", {"question": "Which colour?"}),
                    await client.call_tool("relaying.summarise", {"text": "a long story"}))

    answered, summary = run_async(scenario())
    assert text(answered) == "they said blue"
    assert text(summary) == "summary: A short summary."
    assert [kind for kind, _ in asked] == ["elicitation", "sampling"]
    assert "Which colour?" in asked[0][1] and SECRET not in asked[0][1]
    assert asked[1][1] == "Summarise: a long story"
    events = wait_until(lambda: relay_events(relaying) if len(relay_events(relaying)) == 2 else None)
    (elicited, e), (sampled, s) = events
    assert (elicited, e["call"], e["action"], e["fields"]) == ("elicitation.relayed", "relaying.ask", "accept",
                                                             ["answer"])
    assert SECRET not in e["message"]
    assert (sampled, s["call"], s["model"], s["answer"]) == ("sampling.relayed", "relaying.summarise",
                                                            "host-model-1", "A short summary.")
    assert s["prompt"]["messages"] == [{"role": "user", "text": "Summarise: a long story"}]
    rows = wait_until(lambda: list(ToolCall.objects.filter(org_id=relaying.org.id).order_by("created_at"))
                      if ToolCall.objects.filter(org_id=relaying.org.id, state="succeeded").count() == 2 else None)
    assert [r.qualified_name for r in rows] == ["relaying.ask", "relaying.summarise"]
    trace = signed_in(client, owner).get(f"/runs/{rows[0].run_id}/").content.decode()
    assert 'data-type="elicitation.relayed"' in trace and 'data-type="sampling.relayed"' in trace
    assert "host-model-1" in trace and SECRET not in trace


@pytest.mark.parametrize("mode", ERAS)
def test_a_question_the_gateway_may_not_pass_on_is_refused_with_the_reason(gateway_url, relaying, mode):
    asked: list = []

    async def scenario(**host):
        async with mcp_client(gateway_url, relaying.key, mode=mode, **host) as client:
            return text(await client.call_tool("relaying.ask", {"question": "Which colour?"}))

    relaying.allow(allow_elicitation=False, allow_sampling=True)  # the server's setting is off
    off = run_async(scenario(**answering_host(asked)))
    relaying.allow(allow_elicitation=True)
    # A host without the elicitation capability. The setting reaches gateway processes as a nudge after
    # commit: a call made before it arrives is still refused for the setting.
    def undeclared_answer() -> str | None:
        answer = run_async(scenario())
        return answer if "did not declare" in answer else None

    undeclared = wait_until(undeclared_answer)
    assert asked == []
    assert "may not ask people for input (its elicitation setting is off" in off
    assert "did not declare elicitation" in undeclared
    refusals = relay_events(relaying)
    assert {(kind, e["call"]) for kind, e in refusals} == {("elicitation.refused", "relaying.ask")}
    assert len(refusals) >= 2


def test_sampling_held_by_its_setting_waits_for_a_person_then_reaches_the_host(gateway_url, relaying):
    relaying.allow(allow_sampling=True, hold_sampling=True)
    asked: list = []

    async def scenario():
        async with mcp_client(gateway_url, relaying.key, mode="legacy", **answering_host(asked)) as client:
            return text(await client.call_tool("relaying.summarise", {"text": "a long story"}))

    def person(decision: str):
        try:
            decide(decision, len(asked))
        finally:
            connection.close()

    def decide(decision: str, before: int):
        item = wait_until(lambda: ApprovalRequest.objects.filter(org_id=relaying.org.id, kind="sampling",
                                                                 status="pending").first())
        assert item.context["prompt"]["messages"] == [{"role": "user", "text": "Summarise: a long story"}]
        assert len(asked) == before  # nothing reached the host before the person decided
        response = relaying.approver_api.post(f"/api/v1/approvals/{item.id}/decision", {"decision": decision},
                                              content_type="application/json")
        assert response.status_code == 200, response.content

    async def decided(decision: str):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, person, decision)
            return await scenario()

    assert run_async(decided("approve")) == "summary: A short summary."
    assert asked == [("sampling", "Summarise: a long story")]
    rejected = run_async(decided("reject"))
    assert "a person did not allow this sampling request (rejected" in rejected and len(asked) == 1
    kinds = wait_until(lambda: [k for k, _ in relay_events(relaying)] if len(relay_events(relaying)) >= 3 else None)
    assert kinds == ["sampling.requested", "sampling.relayed", "sampling.requested"]
