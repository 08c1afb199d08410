"""A server's elicitation and sampling during a call, end to end with an MCP server of our own
(tests/runs/asking_server.py, SDK 2.x): the form lands in the inbox, a person's answer goes back to the
server, a server not allowed to ask is declined in words, sampling runs the agent's model and is counted
to the run, and a run waiting on a form does not stop another run on the same worker."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from django.db import connection
from django.test import Client

from apps.approvals.definition_changes import inbox
from apps.approvals.models import ApprovalRequest
from apps.costs.models import UsageRecord
from apps.registry import services as registry_services
from apps.registry.models import McpServer
from apps.runs import decisions, questions, services, worker
from apps.runs.models import Run, RunEvent, ToolCall
from tests.factories import token_for
from tests.runs.conftest import LOOK_UP, ROOT

REFUND = {"tool": "asking.refund_asking", "args": {"order_id": "{{input.order_id}}"}}
SUMMARISE = {"tool": "asking.summarise", "args": {"text": "a very long complaint about a late parcel"}}
SAY = {"say": "{{result}}\nSTATUS: done\nREASON: ok"}


ERAS = {"modern": "2026-07-28", "legacy": "2025-11-25"}


def asking_server(actor, *, tier="internal", era="modern", **requests):
    server = registry_services.create_server(
        actor=actor, name="asking", transport="stdio", trust_tier=tier, command=sys.executable,
        args=["-m", "tests.runs.asking_server"], cwd=str(ROOT), sync=False, timeout_s=20,
        env={"ASKING_ERA": era})
    registry_services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert McpServer.objects.get(id=server.id).protocol_version == ERAS[era]
    if requests:
        registry_services.set_server_requests(actor=actor, server_id=server.id, **requests)
    if tier == "third_party":
        for tool in server.tools.all():
            registry_services.pin_tool(actor=actor, tool_id=tool.id, review=inbox)
    return McpServer.objects.get(id=server.id)


def crew_calling(desk, call, *, name="Asks", policy="auto"):
    agent = desk.agent(f"{name} agent", [{"call": [call]}, SAY], [{"tool": call["tool"], "policy": policy}])
    return desk.sequential(name, [("work", agent, "Work on {order_id}.", [])])


def desk_owner(org):
    from tests.factories import owner_of

    return owner_of(org).user


def api(org, role):
    return Client(headers={"Authorization": f"Bearer {token_for(org, role)}"})


def drive_in_thread(run_id) -> threading.Thread:
    """The engine on a thread of its own, as a worker would run it, while the test answers."""
    def drive():
        try:
            worker.drive_run(run_id=run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=drive)
    thread.start()
    return thread


def wait_for(predicate, timeout=60, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


INPUTS = {"order_id": "A-1001", "amount_cents": 5}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_an_elicitation_is_answered_in_the_inbox_while_another_run_finishes(worker, desk, org, era):
    asking_server(desk.actor, era=era, allow_elicitation=True)
    asking = crew_calling(desk, REFUND)
    reader = desk.agent("Reader", [{"call": [LOOK_UP]}, SAY], [{"tool": "orders.get_order_status", "policy": "auto"}])
    other = desk.sequential("Reads", [("read", reader, "Look up {order_id}.", [])])
    first = services.start_run(actor=desk.actor, crew_id=asking.id, inputs=INPUTS)
    item = wait_for(lambda: ApprovalRequest.objects.filter(run_id=first.id, kind="elicitation").first(),
                    what="the elicitation in the inbox")
    assert item.context["message"] == "How much should A-1001 be refunded?"
    assert item.context["schema"]["properties"]["amount_cents"]["type"] == "integer"
    assert item.context["worker"] and item.context["call_expires_at"] and item.expires_at
    second = services.start_run(actor=desk.actor, crew_id=other.id, inputs=INPUTS)
    done = wait_for(lambda: Run.objects.filter(id=second.id, status="succeeded").first(), what="the other run")
    assert Run.objects.get(id=first.id).status == "running" and done.output  # the first still waits on its form
    approver = api(org, "approver")
    bad = approver.post(f"/api/v1/approvals/{item.id}/answer", {"action": "accept", "content": {"amount_cents": "x"}},
                        content_type="application/json")
    assert bad.status_code == 422 and "content.amount_cents" in str(bad.json())
    answered = approver.post(f"/api/v1/approvals/{item.id}/answer",
                             {"action": "accept", "content": {"amount_cents": 300, "reason": "late"}},
                             content_type="application/json")
    assert answered.status_code == 200, answered.content
    run = wait_for(lambda: Run.objects.filter(id=first.id, status__in=["succeeded", "failed"]).first(),
                   what="the asking run")
    assert run.status == "succeeded", run.error
    assert "refunded 300 cents on A-1001 (late)" in run.output
    answered_event = RunEvent.objects.get(run=run, type="elicitation.answered").data
    assert answered_event["by"] == answered.json()["decided_by"]
    assert answered_event["answer"] == {"action": "accept", "content": {"amount_cents": 300, "reason": "late"}}
    assert RunEvent.objects.filter(run=run, type="elicitation.requested").exists()
    viewer = Client()
    viewer.force_login(desk_owner(org))
    trace = viewer.get(f"/runs/{run.id}/").content.decode()
    assert 'data-type="elicitation.answered"' in trace and answered.json()["decided_by"] in trace
    assert "{&quot;amount_cents&quot;: 300, &quot;reason&quot;: &quot;late&quot;}" in trace  # JSON, not a dict
    assert "&#x27;amount_cents&#x27;" not in trace


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.django_db(transaction=True)
def test_a_declined_form_reaches_the_server_as_decline(desk, approver, era):
    asking_server(desk.actor, era=era, allow_elicitation=True)
    run = services.start_run(actor=desk.actor, crew_id=crew_calling(desk, REFUND).id, inputs=INPUTS, enqueue=False)
    driver = drive_in_thread(run.id)
    item = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run.id, kind="elicitation").first())
    from apps.accounts.actors import member_actor

    questions.answer(actor=member_actor(approver), approval_id=item.id, action="decline")
    driver.join(60)
    run = Run.objects.get(id=run.id)
    assert run.status == "succeeded", run.error
    assert "no refund on A-1001: the person chose decline" in run.output


@pytest.mark.django_db(transaction=True)
def test_a_server_not_allowed_to_elicit_is_told_why_and_third_party_ones_start_off(desk):
    third = registry_services.create_server(actor=desk.actor, name="elsewhere", transport="http",
                                            trust_tier="third_party", url="https://mcp.example.com/mcp", sync=False)
    assert not third.allow_elicitation and not third.allow_sampling
    asking_server(desk.actor, allow_elicitation=False)
    run = services.start_run(actor=desk.actor, crew_id=crew_calling(desk, REFUND).id, inputs=INPUTS, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert not ApprovalRequest.objects.filter(run_id=run.id, kind="elicitation").exists()
    call = ToolCall.objects.get(run=run, qualified_name="asking.refund_asking")
    assert "may not ask people for input" in (call.error + str(call.result)), (call.error, call.result)


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.django_db(transaction=True)
def test_sampling_runs_the_agents_model_and_counts_to_the_run(desk, era, owner, client):
    asking_server(desk.actor, allow_sampling=True, era=era)
    run = services.start_run(actor=desk.actor, crew_id=crew_calling(desk, SUMMARISE).id, inputs=INPUTS,
                             enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert "summary: done" in run.output  # the scripted model's answer to a prompt it has no script for
    event = RunEvent.objects.get(run=run, type="sampling.completed").data
    assert event["prompt"]["messages"][0]["text"].startswith("Summarise: a very long complaint")
    assert event["prompt"]["system"] == "You write one-line summaries." and event["answer"] == "done"
    assert event["tokens_in"] > 0 and event["tokens_out"] > 0
    usage = UsageRecord.objects.filter(run_id=run.id)
    assert usage.count() == 3  # two agent turns and the sampling call
    assert run.tokens_in == sum(u.input_tokens for u in usage)
    client.force_login(owner.user)
    trace = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-type="sampling.completed"' in trace and "Summarise: a very long complaint" in trace


@pytest.mark.django_db(transaction=True)
def test_sampling_is_declined_when_off_and_held_for_a_person_when_set(desk, approver):
    from apps.accounts.actors import member_actor

    server = asking_server(desk.actor)
    crew = crew_calling(desk, SUMMARISE)
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=INPUTS,
                                                       enqueue=False).id)
    call = ToolCall.objects.get(run=run, qualified_name="asking.summarise")
    assert "may not run a model through Airlock" in (call.error + str(call.result))
    registry_services.set_server_requests(actor=desk.actor, server_id=server.id, allow_sampling=True,
                                          hold_sampling=True)
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=INPUTS, enqueue=False)
    driver = drive_in_thread(run.id)
    item = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run.id, kind="sampling").first())
    assert item.context["prompt"]["messages"][0]["text"].startswith("Summarise:")
    client = Client()
    client.force_login(approver.user)
    card = client.get("/inbox/").content.decode()
    assert f'id="approval-{item.id}"' in card and "Edit the arguments" not in card  # approved as asked
    decisions.decide_approval(actor=member_actor(approver), approval_id=item.id, decision="approve")
    driver.join(60)
    run = Run.objects.get(id=run.id)
    assert run.status == "succeeded", run.error
    assert "summary: done" in run.output
