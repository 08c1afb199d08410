"""Trying an agent on its own, re-running, forking and comparing runs, through the API (the pages are in
test_replay_pages.py and the browser walk in test_browser_replay.py)."""

from __future__ import annotations

import pytest

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.approvals.models import ApprovalRequest
from apps.costs.models import UsageRecord
from apps.crews import services as crew_services
from apps.crews.models import Crew
from apps.runs import decisions, services, worker
from apps.runs.messages import turn_messages
from apps.runs.models import Run, RunStep, ToolCall
from tests.factories import token_for

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}
REFUND_FIXED = {"tool": "orders.refund_order", "args": {"order_id": "A-1001", "amount_cents": 500,
                                                        "request_id": "try-A-1001"}}


def _api(client, org, role="builder"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token_for(org, role)}"}

    def call(method, path, body=None):
        fn = getattr(client, method)
        if body is None:
            return fn(f"/api/v1{path}", **headers)
        return fn(f"/api/v1{path}", body, content_type="application/json", **headers)
    return call


def _errors(answer) -> dict:
    assert answer.status_code == 422, answer.content
    return {e["field"]: e["message"] for e in answer.json()["errors"]}


def test_an_agent_is_tried_on_its_own_under_its_policy_with_held_writes_held_and_costs_recorded(desk, client, org,
                                                                                              approver):
    refunder = desk.agent("Refunder", [{"call": [REFUND_FIXED]}, {"say": "Refunded.\nSTATUS: done\nREASON: ok"}],
                          [{"tool": "orders.refund_order", "policy": "approve"}])
    crews_before = Crew.objects.filter(org=org).count()
    api = _api(client, org)

    assert _errors(api("post", f"/agents/{refunder.id}/try", {"message": " "})) == {"message": "Required."}
    answer = api("post", f"/agents/{refunder.id}/try", {"message": "Refund 5 euros on A-1001, please."})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["origin"] == "trial" and body["crew_id"] is None and body["crew_name"] == "Try Refunder"
    assert body["inputs"] == {"message": "Refund 5 euros on A-1001, please."}
    assert Crew.objects.filter(org=org).count() == crews_before  # no crew row was made for it

    run = worker.drive_run(run_id=body["id"])
    assert run.status == "waiting"  # the write is held for a person, as in any crew
    held = ToolCall.objects.get(run=run, state="held")
    assert desk.refunds() == {}
    request = ApprovalRequest.objects.get(id=held.approval_id)
    assert request.status == "pending" and request.context["crew"] == "Try Refunder"
    prompt = turn_messages(RunStep.objects.get(run=run, kind="agent"))
    assert "Refund 5 euros on A-1001, please." in str(prompt)

    decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded" and run.output == "Refunded."
    assert "try-A-1001" in str(desk.refunds())
    usage = UsageRecord.objects.filter(org=org, run_id=run.id)
    assert usage.exists() and {u.agent_id for u in usage} == {refunder.id}
    listed = api("get", f"/runs?agent={refunder.id}").json()["items"]
    assert [r["id"] for r in listed] == [str(run.id)]


def test_a_disabled_agent_cannot_be_tried_and_a_viewer_may_not_try_one(desk, client, org):
    agent = desk.agent("Quiet", [{"say": "Hi.\nSTATUS: done\nREASON: ok"}], [])
    assert _api(client, org, "viewer")("post", f"/agents/{agent.id}/try", {"message": "hi"}).status_code == 403
    agent_services.set_agent_enabled(actor=desk.actor, agent_id=agent.id, enabled=False)
    answer = _api(client, org)("post", f"/agents/{agent.id}/try", {"message": "hi"})
    assert _errors(answer) == {"agent": "This agent is disabled."}


def _finished_desk_run(desk):
    crew = desk.refund_desk(refund_policy="auto")
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded"
    return crew, run


def test_a_rerun_takes_the_same_inputs_and_todays_config_and_links_to_its_parent(desk, client, org):
    crew, parent = _finished_desk_run(desk)
    triage = next(a for a in parent.snapshot["agents"].values() if a["name"].endswith("triage"))
    agent_services.update_agent(actor=desk.actor, agent_id=triage["id"], instructions="Be brief.")
    api = _api(client, org)

    answer = api("post", f"/runs/{parent.id}/rerun")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["origin"] == "rerun" and body["parent_id"] == str(parent.id) and body["inputs"] == A1001
    child = worker.drive_run(run_id=body["id"])
    assert child.status == "succeeded"
    assert child.snapshot["agents"][triage["id"]]["version"] == triage["version"] + 1  # today's config
    parent.refresh_from_db()
    assert parent.snapshot["agents"][triage["id"]]["version"] == triage["version"]  # the original untouched

    unfinished = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    assert api("post", f"/runs/{unfinished.id}/rerun").status_code == 409


def test_a_fork_runs_again_from_the_chosen_turn_with_an_edited_prompt_and_leaves_the_parent_alone(desk, client,
                                                                                                   org):
    _, parent = _finished_desk_run(desk)
    parent_steps = list(RunStep.objects.filter(run=parent).values_list("position", "kind", "task", "output"))
    refund_turn = RunStep.objects.get(run=parent, kind="agent", task="refund")
    api = _api(client, org)

    bad = api("post", f"/runs/{parent.id}/fork", {"step": 999})
    assert _errors(bad) == {"step": "Not an agent turn of this run."}
    bad = api("post", f"/runs/{parent.id}/fork", {"step": refund_turn.position, "inputs": {"amount_cents": "x"}})
    assert _errors(bad) == {"inputs.amount_cents": "A whole number."}

    answer = api("post", f"/runs/{parent.id}/fork", {"step": refund_turn.position,
                                                      "prompt": "Refund {amount_cents} cents on {order_id}, politely.",
                                                      "inputs": {"amount_cents": 650}})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["origin"] == "fork" and body["parent_id"] == str(parent.id)
    assert body["parent_step"] == refund_turn.position and body["inputs"] == {**A1001, "amount_cents": 650}
    fork = worker.drive_run(run_id=body["id"])
    assert fork.status == "succeeded"
    turns = list(RunStep.objects.filter(run=fork, kind="agent").values_list("task", flat=True))
    assert turns == ["refund"]  # triage is not run again: its output is carried over
    assert fork.state["outputs"]["triage"] == parent.state["outputs"]["triage"]
    # its status too, but not its evidence: those calls are the parent's, which the fork's run.get_result cannot read
    assert parent.state["conclusions"]["triage"]["evidence"]
    assert fork.state["conclusions"]["triage"] == {**parent.state["conclusions"]["triage"], "evidence": []}
    first = turn_messages(RunStep.objects.get(run=fork, kind="agent"))
    assert "Refund 650 cents on A-1001, politely." in str(first) and "Refundable." in str(first)
    assert "Status: done: ok" in str(first) and "Evidence" not in str(first)
    assert list(RunStep.objects.filter(run=parent).values_list("position", "kind", "task", "output")) == parent_steps

    compared = api("get", f"/runs/compare?a={parent.id}&b={fork.id}").json()
    assert compared["a"]["turns"] == 2 and compared["b"]["turns"] == 1
    assert compared["a"]["inputs"]["amount_cents"] == 700 and compared["b"]["inputs"]["amount_cents"] == 650
    assert compared["b"]["origin"] == "fork" and compared["a"]["status"] == compared["b"]["status"] == "succeeded"
    assert {"crew_version", "agent_versions", "tokens_in", "cost_usd", "duration_ms", "failed_calls"} <= set(
        compared["a"])
    assert [c["path"] for c in compared["config_changes"]] == ["crew.tasks"]


def test_a_supervisor_run_is_not_forked_from_a_step_but_can_be_rerun(desk, client, org):
    member = desk.agent("Helper", [{"say": "Done.\nSTATUS: done\nREASON: ok"}], [])
    boss = desk.agent("Boss", [{"route": "Helper"}, {"route": "FINISH"}], [])
    crew = crew_services.create_crew(actor=desk.actor, name="Bossed", process="supervisor",
                                     supervisor_agent_id=boss.id, members=[member.id], inputs=[])
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, enqueue=False).id)
    assert run.is_finished
    turn = RunStep.objects.filter(run=run, kind="agent").first()
    answer = _api(client, org)("post", f"/runs/{run.id}/fork", {"step": turn.position})
    assert _errors(answer) == {"step": "Not available for supervisor crews."}
    assert _api(client, org)("post", f"/runs/{run.id}/rerun").status_code == 201
    assert Run.objects.filter(parent=run).count() == 1
