"""Trying an agent from its page, re-running, forking and comparing runs in the web pages."""

from __future__ import annotations

import pytest

from apps.agents import services as agent_services
from apps.runs import decisions, services, worker
from apps.runs.models import Run, RunStep
from tests.conftest import signed_in

pytestmark = pytest.mark.django_db

A1001 = {"order_id": "A-1001", "amount_cents": 700}


def test_a_builder_tries_an_agent_from_its_page_and_lands_on_the_trial_run(client, desk, builder, viewer):
    agent = desk.agent("Greeter", [{"say": "Hello there.\nSTATUS: done\nREASON: greeted"}], [])
    signed_in(client, builder)
    page = client.get(f"/agents/{agent.id}/").content.decode()
    assert 'data-testid="try-agent"' in page and "Try this agent" in page

    empty = client.post(f"/agents/{agent.id}/try/", {"message": "  "})
    assert empty.status_code == 422 and "Required." in empty.content.decode()
    started = client.post(f"/agents/{agent.id}/try/", {"message": "Say hello"})
    run = Run.objects.get(origin="trial")
    assert started.status_code == 302 and started["Location"] == f"/runs/{run.id}/"
    worker.drive_run(run_id=run.id)
    detail = client.get(f"/runs/{run.id}/").content.decode()
    assert "An agent tried on its own, without a crew." in detail and "Hello there." in detail
    assert "no longer exists" not in detail
    agent_services.update_agent(actor=desk.actor, agent_id=agent.id, instructions="Be warm.")
    assert "agents.Greeter.instructions" in client.get(f"/runs/{run.id}/").content.decode()  # vs today's agent
    assert client.get(f"/agents/{agent.id}/try/").status_code == 302  # a GET of the POST URL goes to the page

    signed_in(client, viewer)
    assert 'data-testid="try-agent"' not in client.get(f"/agents/{agent.id}/").content.decode()
    assert client.post(f"/agents/{agent.id}/try/", {"message": "hi"}).status_code == 403


def test_a_finished_run_is_rerun_forked_and_compared_in_the_pages(client, desk, builder):
    crew = desk.refund_desk(refund_policy="auto")
    parent = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                          enqueue=False).id)
    signed_in(client, builder)
    detail = client.get(f"/runs/{parent.id}/").content.decode()
    assert 'data-testid="rerun"' in detail and 'data-testid="fork"' in detail

    rerun = client.post(f"/runs/{parent.id}/rerun/")
    child = Run.objects.get(parent=parent, origin="rerun")
    assert rerun["Location"] == f"/runs/{child.id}/" and child.inputs == A1001
    assert "Re-run of" in client.get(f"/runs/{child.id}/").content.decode()

    refund = RunStep.objects.get(run=parent, kind="agent", task="refund")
    assert f"/runs/{parent.id}/fork/?step={refund.position}" in detail  # "Fork from here" on the turn
    form = client.get(f"/runs/{parent.id}/fork/?step={refund.position}").content.decode()
    assert "Refund {amount_cents} cents on {order_id}." in form and 'value="700"' in form
    bad = client.post(f"/runs/{parent.id}/fork/", {"step": refund.position, "prompt": "x",
                                                   "input_order_id": "A-1001", "input_amount_cents": "lots"})
    assert bad.status_code == 422 and "A whole number." in bad.content.decode()
    forked = client.post(f"/runs/{parent.id}/fork/", {"step": refund.position, "prompt": "Refund {amount_cents} now.",
                                                      "input_order_id": "A-1001", "input_amount_cents": "650"})
    fork = Run.objects.get(parent=parent, origin="fork")
    assert forked["Location"] == f"/runs/{fork.id}/" and fork.parent_step == refund.position
    assert fork.snapshot["crew"]["tasks"][1]["description"] == "Refund {amount_cents} now."
    worker.drive_run(run_id=fork.id)
    assert f"at step {refund.position}" in client.get(f"/runs/{fork.id}/").content.decode()

    compared = client.get(f"/runs/compare/?a={parent.id}&b={fork.id}").content.decode()
    assert 'data-testid="compare-table"' in compared and "differs" in compared
    assert "crew.tasks" in compared and "Refund {amount_cents} now." in compared
    assert client.get(f"/runs/compare/?a={fork.id}").status_code == 200  # with its parent
    lonely = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    assert client.get(f"/runs/compare/?a={lonely.id}").status_code == 404


def test_the_runs_list_and_the_crews_page_show_duration_and_failed_calls(client, desk, owner):
    crew = desk.refund_desk()
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    held = run.ledger.get(state="held")
    decisions.decide_approval(actor=desk.actor, approval_id=held.approval_id, decision="reject", comment="no")
    run = worker.drive_run(run_id=run.id)
    assert run.is_finished
    signed_in(client, owner)
    listed = client.get("/runs/").content.decode()
    assert ">Duration</th>" in listed and ">Failed calls</th>" in listed
    assert '<span class="text-red fw-bold">1</span>' in listed  # the rejected refund
    assert " s</td>" in listed
    page = client.get(f"/crews/{crew.id}/").content.decode()
    assert 'data-testid="crew-runs"' in page and f"/runs/{run.id}/" in page
    assert f"/runs/?crew={crew.id}" in page


def test_the_trace_folds_per_turn_and_model_call_with_durations_and_the_runs_costs_are_one_click_away(
        client, desk, owner):
    crew = desk.refund_desk(refund_policy="auto")
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    other = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                         enqueue=False).id)
    signed_in(client, owner)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert page.count('<details class="card mb-3" open data-testid="turn">') == 2
    assert page.count('data-testid="model-call"') == RunStep.objects.filter(run=run, kind="llm").count()
    assert page.count('data-testid="turn-duration"') == 2 and " s</span>" in page
    assert f"/costs/export.csv?run={run.id}" in page
    csv = b"".join(client.get(f"/costs/export.csv?run={run.id}").streaming_content).decode()
    lines = csv.strip().splitlines()
    assert len(lines) - 1 == RunStep.objects.filter(run=run, kind="llm").count() > 0
    assert str(run.id) in csv and str(other.id) not in csv
    assert client.get("/costs/export.csv?run=00000000-0000-0000-0000-000000000000").status_code == 404


def test_the_new_pages_label_their_controls_and_name_their_buttons(client, desk, owner):
    from tests.web.test_accessibility import audit

    crew = desk.refund_desk()
    held = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                        enqueue=False).id)
    decisions.decide_approval(actor=desk.actor, approval_id=held.ledger.get(state="held").approval_id,
                             decision="reject")
    parent = worker.drive_run(run_id=held.id)
    child = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                         enqueue=False).id)  # waits in the inbox
    signed_in(client, owner)
    agent = RunStep.objects.filter(run=parent, kind="agent").first().agent_id
    for url in ["/inbox/", f"/runs/{parent.id}/fork/", f"/agents/{agent}/",
                f"/runs/compare/?a={parent.id}&b={child.id}", f"/crews/{crew.id}/", "/runs/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        page = audit(response.content.decode())
        assert page.problems() == [], url
