"""Deciding held calls: once, by the right people, bound to the arguments, with M of N, standing
approvals and expiry; the run resumes with the outcome and the tool runs at most once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.approvals import standing
from apps.approvals.definition_changes import inbox
from apps.approvals.models import ApprovalRequest, ApprovalVote, StandingApproval
from apps.audit.models import AuditEvent
from apps.audit.selectors import verify_chain
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.crews import services as crew_services
from apps.registry import services as registry_services
from apps.registry.models import Tool
from apps.runs import decisions, services, tasks
from apps.runs import worker as run_worker
from apps.runs.models import Run, RunEvent, ToolCall
from tests.factories import add_member, make_org, token_for
from tests.runs.conftest import LOOK_UP, REFUND

A1001 = {"order_id": "A-1001", "amount_cents": 500}


def finish(run_id, timeout=60.0):
    """Drives the run here, or waits for a session worker that claimed the resume first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = run_worker.drive_run(run_id=run_id)
        if run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish")


def held_run(desk, crew, actor=None, inputs=A1001):
    run = services.start_run(actor=actor or desk.actor, crew_id=crew.id, inputs=inputs, enqueue=False)
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "waiting", run.error
    return run, ApprovalRequest.objects.get(run_id=run.id, status="pending")


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_one_wins_the_other_gets_409_and_the_refund_happens_once(desk, org):
    crew = desk.refund_desk()
    run, request = held_run(desk, crew)
    people = [member_actor(add_member(org, "approver")), member_actor(add_member(org, "approver"))]
    barrier, outcomes = threading.Barrier(2), []

    def decide(actor):
        try:
            barrier.wait()
            decisions.decide_approval(actor=actor, approval_id=request.id, decision="approve")
            outcomes.append("won")
        except Conflict as exc:
            outcomes.append(f"409: {exc.message}")
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(a,)) for a in people]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o[:3] for o in outcomes) == ["409", "won"], outcomes
    assert "already approved by" in next(o for o in outcomes if o.startswith("409"))
    run = finish(run.id)
    assert run.status == "succeeded", run.error
    assert list(desk.refunds()) == ["refund-A-1001"]
    assert ToolCall.objects.filter(run=run, qualified_name="orders.refund_order", state="succeeded").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_a_decision_holds_the_request_waits_for_it_instead_of_deadlocking(desk, org):
    """Deciding locks the request, then the run. A cancel of the waiting run locks the run's requests before
    the run too; had it taken the run first, the two would wait on each other and Postgres would abort one
    with a deadlock error. The decision is played step by step: request locked, then (while the cancel is
    under way) the run."""
    run, request = held_run(desk, desk.refund_desk())
    request_locked, errors = threading.Event(), []

    def deciding():
        try:
            with transaction.atomic():
                ApprovalRequest.objects.select_for_update().get(id=request.id)
                request_locked.set()
                time.sleep(0.5)  # the cancel starts meanwhile
                Run.objects.select_for_update().get(id=run.id)
        except Exception as exc:  # a deadlock error is what must not happen
            errors.append(repr(exc))
        finally:
            connection.close()

    def cancelling():
        try:
            request_locked.wait(10)
            services.cancel_run(actor=desk.actor, run_id=run.id)
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=deciding), threading.Thread(target=cancelling)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    run.refresh_from_db()
    request.refresh_from_db()
    assert (run.status, request.status) == ("cancelled", "expired")
    assert list(desk.refunds()) == []


@pytest.mark.django_db
def test_the_api_answers_409_to_a_second_decision_and_filters_the_inbox(desk, org):
    crew = desk.refund_desk()
    _run, request = held_run(desk, crew)
    client = Client(headers={"Authorization": f"Bearer {token_for(org, 'approver')}"})
    listed = client.get(f"/api/v1/approvals?status=pending&crew={crew.id}&risk=write&kind=tool_call").json()
    assert [i["id"] for i in listed["items"]] == [str(request.id)]
    item = listed["items"][0]
    assert item["tool"] == "orders.refund_order" and item["server"] == "orders" and item["trust_tier"] == "internal"
    assert "approve" in item["reason"] and item["arguments"]["amount_cents"] == 500
    assert client.get("/api/v1/approvals?status=pending&risk=dangerous").json()["count"] == 0
    assert client.get("/api/v1/approvals?status=pending&kind=definition_change").json()["count"] == 0
    first = client.post(f"/api/v1/approvals/{request.id}/decision", {"decision": "reject", "comment": "no"},
                        content_type="application/json")
    assert first.status_code == 200 and first.json()["status"] == "rejected"
    second = client.post(f"/api/v1/approvals/{request.id}/decision", {"decision": "approve"},
                         content_type="application/json")
    assert second.status_code == 409 and "already rejected by" in second.json()["detail"]


@pytest.mark.django_db
def test_a_decisions_answer_shows_the_request_as_a_fresh_read_does_and_another_orgs_is_not_found(desk, org):
    """The decision's answer is read with its locks (apps.runs.decisions._locked, prebuilt statements): it shows
    what a GET afterwards shows, the agent, tool, server and trust tier, the status and every vote in order."""
    crew = desk.refund_desk(approvals_required=2)
    _run, request = held_run(desk, crew)
    tokens = [token_for(org, "approver", member=add_member(org, "approver")) for _ in range(2)]
    voters = [Client(headers={"Authorization": f"Bearer {token}"}) for token in tokens]
    url = f"/api/v1/approvals/{request.id}"
    outsider = Client(headers={"Authorization": f"Bearer {token_for(make_org(), 'approver')}"})
    refused = outsider.post(f"{url}/decision", {"decision": "approve"}, content_type="application/json")
    assert refused.status_code == 404
    for voter, comment, status in [(voters[0], "fine by me", "pending"), (voters[1], "", "approved")]:
        answer = voter.post(f"{url}/decision", {"decision": "approve", "comment": comment},
                            content_type="application/json")
        assert answer.status_code == 200, answer.content
        assert answer.json() == voter.get(url).json()
        assert answer.json()["status"] == status
    shown = answer.json()
    assert (shown["agent"], shown["tool"], shown["server"], shown["trust_tier"]) == (
        "Refund desk refunds", "orders.refund_order", "orders", "internal")
    assert [(vote["decision"], vote["comment"]) for vote in shown["votes"]] == [("approve", "fine by me"),
                                                                                ("approve", "")]
    assert shown["decided_by"] and shown["decided_at"] and A1001.items() <= shown["approved_arguments"].items()
    _run, single = held_run(desk, desk.refund_desk(name="Single"))  # one approval: its answer reads no vote back
    answer = voters[0].post(f"/api/v1/approvals/{single.id}/decision", {"decision": "reject", "comment": "no"},
                            content_type="application/json")
    assert answer.status_code == 200 and answer.json() == voters[0].get(f"/api/v1/approvals/{single.id}").json()
    assert [(vote["decision"], vote["comment"]) for vote in answer.json()["votes"]] == [("reject", "no")]


@pytest.mark.django_db
def test_a_vote_the_database_refuses_leaves_no_part_of_the_decision_written(desk, org):
    """A decision's writes go out in one batch with its COMMIT (apps.runs.decisions.decide_approval). When the
    database refuses one of them (here a second vote of one person, `approval_vote_once`, which the checks under
    the lock cannot see on a request that needs one approval), the person gets 409 and none of it is kept: not the
    request's new status, the run's event, its resume or the audit row."""
    crew = desk.refund_desk()
    run, request = held_run(desk, crew)
    approver = add_member(org, "approver")
    ApprovalVote.objects.create(org=org, request=request, user=approver.user, actor_label=approver.user.email,
                                decision="approve")
    client = Client(headers={"Authorization": f"Bearer {token_for(org, 'approver', member=approver)}"})
    events, audited = RunEvent.objects.filter(run=run).count(), AuditEvent.objects.filter(org=org).count()
    answer = client.post(f"/api/v1/approvals/{request.id}/decision", {"decision": "approve"},
                         content_type="application/json")
    assert answer.status_code == 409 and answer.json()["detail"] == "You already voted on this request."
    request.refresh_from_db()
    assert (request.status, request.decided_at, request.votes.count()) == ("pending", None, 1)
    assert Run.objects.get(id=run.id).status == "waiting"
    assert RunEvent.objects.filter(run=run).count() == events
    assert AuditEvent.objects.filter(org=org).count() == audited
    other = client.post(f"/api/v1/approvals/{held_run(desk, crew)[1].id}/decision", {"decision": "approve"},
                        content_type="application/json")
    assert other.status_code == 200 and other.json()["status"] == "approved"  # the connection is usable after


@pytest.mark.django_db
def test_edited_arguments_are_checked_against_the_schema_and_an_old_decision_is_not_replayed(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    run, request = held_run(desk, crew)
    first, second = (member_actor(add_member(org, "approver")) for _ in range(2))
    with pytest.raises(ValidationFailed) as bad:
        decisions.decide_approval(actor=first, approval_id=request.id, decision="approve",
                                 arguments={**request.arguments, "amount_cents": "lots"})
    assert "arguments.amount_cents" in bad.value.errors
    decisions.decide_approval(actor=first, approval_id=request.id, decision="approve",
                             arguments={**request.arguments, "amount_cents": 300})
    request.refresh_from_db()
    assert request.status == "pending" and request.approved_arguments["amount_cents"] == 300
    # The second approver's page showed the arguments as proposed: that decision is refused.
    with pytest.raises(Conflict, match="arguments changed"):
        decisions.decide_approval(actor=second, approval_id=request.id, decision="approve",
                                 expected_args_hash=request.args_hash)
    decisions.decide_approval(actor=second, approval_id=request.id, decision="approve",
                             expected_args_hash=request.approved_args_hash)
    # Replaying an approval against arguments it was not given for: the ledger refuses to call.
    ApprovalRequest.objects.filter(id=request.id).update(approved_arguments={**request.arguments,
                                                                             "amount_cents": 99999})
    run = run_worker.drive_run(run_id=run.id)
    refund = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert refund.state == "rejected" and "does not match" in refund.reason
    assert desk.refunds() == {}


@pytest.mark.django_db
def test_an_approved_edit_runs_with_the_edited_arguments(desk, org):
    crew = desk.refund_desk()
    run, request = held_run(desk, crew)
    decisions.decide_approval(actor=member_actor(add_member(org, "approver")), approval_id=request.id,
                             decision="approve", arguments={**request.arguments, "amount_cents": 250})
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert desk.refunds()["refund-A-1001"]["amount_cents"] == 250


@pytest.mark.django_db
def test_separation_of_duties_for_dangerous_tools_and_no_standing_approval(desk, org):
    admin = member_actor(add_member(org, "admin"))
    tool = Tool.objects.get(qualified_name="orders.refund_order")
    registry_services.update_tool(actor=desk.actor, tool_id=tool.id, risk="dangerous", review=inbox)
    crew = desk.refund_desk()
    run, request = held_run(desk, crew, actor=admin)
    assert request.risk == "dangerous" and request.requested_by_user_id == admin.user_id
    with pytest.raises(PermissionDenied, match="someone else"):
        decisions.decide_approval(actor=admin, approval_id=request.id, decision="approve")
    approver = member_actor(add_member(org, "approver"))
    with pytest.raises(ValidationFailed):
        decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve",
                                 standing={"scope": "run"})
    viewer = member_actor(add_member(org, "viewer"))
    with pytest.raises(PermissionDenied):
        decisions.decide_approval(actor=viewer, approval_id=request.id, decision="approve")
    decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve")
    assert run_worker.drive_run(run_id=run.id).status == "succeeded"
    assert StandingApproval.objects.count() == 0


@pytest.mark.django_db
def test_m_of_n_each_person_once_and_any_rejection_rejects(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    run, request = held_run(desk, crew)
    assert request.required_approvals == 2
    one, two, three = (member_actor(add_member(org, "approver")) for _ in range(3))
    decisions.decide_approval(actor=one, approval_id=request.id, decision="approve")
    with pytest.raises(Conflict, match="already voted"):
        decisions.decide_approval(actor=one, approval_id=request.id, decision="approve")
    request.refresh_from_db()
    assert request.status == "pending"
    decisions.decide_approval(actor=two, approval_id=request.id, decision="reject", comment="too much")
    request.refresh_from_db()
    assert request.status == "rejected" and request.decided_by_label == two.label
    with pytest.raises(Conflict):
        decisions.decide_approval(actor=three, approval_id=request.id, decision="approve")
    run = run_worker.drive_run(run_id=run.id)
    refund = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert refund.state == "rejected" and "too much" in refund.reason
    assert desk.refunds() == {}


@pytest.mark.django_db
def test_two_of_two_votes_are_counted_chained_in_the_audit_and_the_run_resumes_once_with_its_wait(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    run, request = held_run(desk, crew)
    one, two = (member_actor(add_member(org, "approver")) for _ in range(2))
    decisions.decide_approval(actor=one, approval_id=request.id, decision="approve", comment="fine by me")
    run.refresh_from_db()
    assert run.status == "waiting"
    voted = RunEvent.objects.get(run=run, type="approval.voted")
    assert (voted.data["votes"], voted.data["required"], voted.data["by"]) == (1, 2, one.label)
    decisions.decide_approval(actor=two, approval_id=request.id, decision="approve")
    run.refresh_from_db()
    assert run.status == "queued"
    votes = AuditEvent.objects.filter(org_id=org.id, action="approval.approve", target_id=str(request.id))
    assert [(e.actor_label, e.data["votes"], e.data["status"]) for e in votes.order_by("seq")] == [
        (one.label, 1, "pending"), (two.label, 2, "approved")]
    assert verify_chain(org_id=org.id).intact
    run = finish(run.id)
    assert run.status == "succeeded", run.error
    assert list(desk.refunds()) == ["refund-A-1001"]  # once
    refund = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert refund.state == "succeeded" and refund.approved_arguments == refund.arguments
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type"))
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))  # gapless, the claim's event included
    assert [t for _, t in events].count("run.resumed") == 1
    assert "waiting_since" not in run.state and run.state["waited_s"] > 0


@pytest.mark.stack  # pg_terminate_backend
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_connection_between_tasks_and_replaces_one_the_database_dropped(desk, org,
                                                                                         process_logs):
    """config/celery.py: Django's connection rules at task boundaries instead of a new connection per
    task; one the database dropped while the worker was idle is replaced before the resume's first query."""
    from tests.processes import celery_worker

    def others():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            return cursor.fetchone()[0]

    def wait(**filters):
        deadline = time.monotonic() + 60
        while not Run.objects.filter(**filters).exists():
            assert time.monotonic() < deadline, f"no run with {filters}"
            time.sleep(0.1)

    crew = desk.refund_desk()
    with celery_worker(process_logs, concurrency=1, DJANGO_SETTINGS_MODULE="tests.approvals.persistent_settings"):
        run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001)
        wait(id=run.id, status="waiting")
        time.sleep(0.5)  # the task has ended
        assert others() >= 1  # the worker's connection outlived its task (and is dropped now)
        request = ApprovalRequest.objects.get(run_id=run.id, status="pending")
        decisions.decide_approval(actor=member_actor(add_member(org, "approver")), approval_id=request.id,
                                 decision="approve")
        wait(id=run.id, status__in=["succeeded", "failed"])
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert list(desk.refunds()) == ["refund-A-1001"]


def two_refunds(desk, name="Twice"):
    second = {**REFUND, "args": {**REFUND["args"], "request_id": "refund-again-{{input.order_id}}"}}
    agent = desk.agent(f"{name} agent", [{"call": [LOOK_UP]}, {"call": [REFUND]}, {"call": [second]},
                                         {"say": "Done.\nSTATUS: done\nREASON: ok"}],
                       [{"tool": "orders.get_order_status", "policy": "auto"},
                        {"tool": "orders.refund_order", "policy": "approve"}])
    return agent, desk.sequential(name, [("refund", agent, "Refund {order_id}.", [])])


@pytest.mark.django_db
def test_a_standing_approval_for_the_rest_of_the_run_covers_only_that_run(desk, org):
    _agent, crew = two_refunds(desk)
    run, request = held_run(desk, crew)
    approver = member_actor(add_member(org, "approver"))
    decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve", standing={"scope": "run"})
    run = run_worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    assert sorted(desk.refunds()) == ["refund-A-1001", "refund-again-A-1001"]
    again = ToolCall.objects.get(run=run, arguments__request_id="refund-again-A-1001")
    grant = StandingApproval.objects.get()
    assert again.rule == "standing_approval" and str(grant.id) in again.reason and approver.label in again.reason
    assert grant.hits == 1 and grant.hit_rows.get().tool_call_id == again.id
    # Another run of the same crew is held again.
    other, _ = held_run(desk, crew, inputs={"order_id": "A-1002", "amount_cents": 5})
    assert other.status == "waiting"


@pytest.mark.django_db
def test_an_agent_tool_standing_approval_matches_its_condition_agent_tool_and_time(desk, org):
    agent, crew = two_refunds(desk)
    _run, request = held_run(desk, crew)
    approver = member_actor(add_member(org, "approver"))
    with pytest.raises(ValidationFailed) as bad:
        decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve",
                                 standing={"scope": "agent_tool", "condition": "amount_cents <=", "hours": 1})
    assert "standing.condition" in bad.value.errors
    decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve",
                             standing={"scope": "agent_tool", "condition": "amount_cents <= 1000", "hours": 2})
    grant = StandingApproval.objects.get()
    tool = Tool.objects.get(qualified_name="orders.refund_order")
    look_up = Tool.objects.get(qualified_name="orders.get_order_status")

    def match(**overrides):
        values = {"org_id": org.id, "run_id": None, "agent_id": agent.id, "tool_id": tool.id, "risk": "write",
                  "arguments": {"order_id": "B-1", "amount_cents": 900}, **overrides}
        return standing.matching_standing(**values)

    assert match() == grant
    assert match(arguments={"order_id": "B-1", "amount_cents": 5000}) is None
    assert match(tool_id=look_up.id) is None
    other_agent = desk.agent("Someone else", [], [{"tool": "orders.refund_order", "policy": "approve"}])
    assert match(agent_id=other_agent.id) is None
    assert match(risk="dangerous") is None
    # Through the engine: a new run's small refund runs without asking and counts a hit.
    small = run_worker.drive_run(run_id=services.start_run(actor=desk.actor, crew_id=crew.id, enqueue=False,
                                                         inputs={"order_id": "A-1002", "amount_cents": 5}).id)
    assert small.status == "succeeded", small.error
    grant.refresh_from_db()
    assert grant.hits >= 2
    StandingApproval.objects.filter(id=grant.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert match() is None
    StandingApproval.objects.filter(id=grant.id).update(expires_at=timezone.now() + timedelta(hours=1))
    standing.revoke_standing(actor=approver, standing_id=grant.id)
    assert match() is None


@pytest.mark.django_db
def test_expiry_by_beat_rejects_and_the_run_continues_with_that_outcome(desk, org):
    crew = crew_services.update_crew(actor=desk.actor, crew_id=desk.refund_desk().id, approval_ttl_hours=2)
    run, request = held_run(desk, crew)
    assert timedelta(hours=1, minutes=59) < request.expires_at - request.created_at <= timedelta(hours=2)
    assert tasks.expire_approvals.apply().get() == 0
    ApprovalRequest.objects.filter(id=request.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert tasks.expire_approvals.apply().get() == 1
    request.refresh_from_db()
    assert request.status == "expired"
    run.refresh_from_db()
    assert run.status == "queued"
    run = run_worker.drive_run(run_id=run.id)
    refund = ToolCall.objects.get(run=run, qualified_name="orders.refund_order")
    assert refund.state == "expired" and "expired" in refund.reason
    assert run.status in ("succeeded", "failed") and desk.refunds() == {}
