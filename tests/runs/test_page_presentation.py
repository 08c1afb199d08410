"""What the run page and the inbox show about a call: JSON arguments, edits made by an approver,
the final answer once, the heading's words apart."""

from __future__ import annotations

import re

import pytest

from apps.crews import services as crew_services
from apps.runs import services, worker
from tests.conftest import signed_in
from tests.runs.conftest import INPUTS

A1001 = {"order_id": "A-1001", "amount_cents": 500}
pytestmark = pytest.mark.django_db


def _held_run(desk):
    crew = desk.refund_desk()
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001,
                                                       enqueue=False).id)
    return run, run.ledger.get(state="held").approval


def test_arguments_and_inputs_are_shown_as_json_not_python(client, desk, approver):
    run, _ = _held_run(desk)
    signed_in(client, approver)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert "&quot;order_id&quot;: &quot;A-1001&quot;" in page
    assert "&#x27;order_id&#x27;" not in page and "'order_id'" not in page
    inbox = client.get("/inbox/").content.decode()
    assert "&#x27;order_id&#x27;" not in inbox


def test_an_edited_approval_says_so_on_the_run_page_and_in_the_inbox(client, desk, approver):
    run, approval = _held_run(desk)
    signed_in(client, approver)
    decided = client.post(f"/inbox/{approval.id}/decide/", {
        "decision": "approve", "args_hash": approval.args_hash, "arg.order_id": "A-1001",
        "arg.amount_cents": "300", "arg.request_id": "refund-A-1001"}, HTTP_HX_REQUEST="true")
    assert decided.status_code == 200
    card = decided.content.decode()
    assert 'data-testid="edited-arguments"' in card and "Approved with edited arguments" in card
    assert "-  &quot;amount_cents&quot;: 500," in card and "+  &quot;amount_cents&quot;: 300," in card
    worker.drive_run(run_id=run.id)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert f"Arguments edited by {approver.user.email} before approval." in page
    proposed = page.split('data-testid="proposed-arguments">')[1].split("</pre>")[0]
    edited = page.split('data-testid="effective-arguments">')[1].split("</pre>")[0]
    assert "500" in proposed and "300" in edited
    assert 'data-testid="edited-badge"' in client.get("/inbox/").content.decode()


def test_an_unedited_approval_shows_one_argument_block(client, desk, approver):
    run, approval = _held_run(desk)
    signed_in(client, approver)
    client.post(f"/inbox/{approval.id}/decide/", {"decision": "approve", "args_hash": approval.args_hash})
    worker.drive_run(run_id=run.id)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="edited-arguments"' not in page
    assert 'data-testid="edited-badge"' not in client.get("/inbox/").content.decode()


def test_the_final_answer_appears_once_and_the_heading_keeps_its_space(client, desk, approver):
    run, approval = _held_run(desk)
    signed_in(client, approver)
    client.post(f"/inbox/{approval.id}/decide/", {"decision": "approve", "args_hash": approval.args_hash})
    run = worker.drive_run(run_id=run.id)
    assert run.output
    page = client.get(f"/runs/{run.id}/").content.decode()
    shown = page.split("The snapshot this run used")[0]
    assert shown.count(run.output) == 1
    assert 'class="text-secondary small ms-2" data-testid="started-by">started by' in page


# A Python repr where JSON belongs: a quoted key ('order_id': ...) or True/False/None as a value.
PYTHON_VALUE = re.compile(r"&#x27;[\w.-]+&#x27;: |[:=\[(] ?(True|False|None)[,})\]]|value=\"(True|False|None)\"")


def test_no_page_shows_inputs_arguments_or_schemas_as_python(client, desk, owner):
    crew = desk.refund_desk(inputs=[*INPUTS, {"name": "urgent", "type": "boolean", "required": False}])
    run = worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id,
                                                       inputs={**A1001, "urgent": True}, enqueue=False).id)
    approval = run.ledger.get(state="held").approval
    signed_in(client, owner)
    client.post(f"/inbox/{approval.id}/decide/", {
        "decision": "approve", "args_hash": approval.args_hash, "arg.order_id": "A-1001",
        "arg.amount_cents": "300", "arg.request_id": "refund-A-1001"})
    run = worker.drive_run(run_id=run.id)
    refund = run.ledger.get(qualified_name="orders.refund_order")
    turn = run.steps.get(kind="agent", task="refund")
    crew_services.update_crew(actor=desk.actor, crew_id=crew.id, inputs=INPUTS)  # the run page lists the change
    fork, fork_call = f"/runs/{run.id}/fork/?step={turn.position}", f"/runs/{run.id}/fork/calls/{refund.id}/"
    pages = [f"/runs/{run.id}/", fork, fork_call, "/inbox/", f"/tools/{refund.tool_id}/", f"/crews/{crew.id}/",
             f"/agents/{approval.agent_id}/", "/audit/", "/runs/", "/"]
    shown = {path: client.get(path).content.decode() for path in pages}
    assert {path: PYTHON_VALUE.findall(html) for path, html in shown.items() if PYTHON_VALUE.search(html)} == {}
    assert "&quot;urgent&quot;: true" in shown[f"/runs/{run.id}/"]
    assert "&quot;required&quot;: false" in shown[f"/runs/{run.id}/"].split('data-testid="config-diff"')[1]
    assert 'id="input_urgent" name="input_urgent" value="true"' in shown[fork]
    assert "&quot;order_id&quot;: &quot;A-1001&quot;" in shown[fork_call]
