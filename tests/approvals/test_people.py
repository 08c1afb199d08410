"""M of N counts people, not credentials: a token is its member, on every vote path; a run's starter
never approves its calls when its crew separates duties; a standing approval (one person's) never
stands in for several people."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.accounts import services as accounts
from apps.accounts.actors import member_actor
from apps.approvals import standing
from apps.approvals.models import ApprovalRequest
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.runs import decisions, services, worker
from tests.approvals.test_decisions import A1001, held_run
from tests.factories import add_member, token_for


def vote(token: str, approval_id, decision: str = "approve", **body):
    client = Client(headers={"Authorization": f"Bearer {token}"})
    return client.post(f"/api/v1/approvals/{approval_id}/decision", {"decision": decision, **body},
                       content_type="application/json")


@pytest.mark.django_db
def test_one_admin_with_two_tokens_is_one_vote_of_a_two_of_two(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    _, request = held_run(desk, crew)
    admin = add_member(org, "admin")
    first, second = token_for(org, "admin", "ci", member=admin), token_for(org, "approver", "laptop", member=admin)
    assert vote(first, request.id).status_code == 200
    answer = vote(second, request.id)
    assert answer.status_code == 409 and "already voted" in answer.json()["detail"]
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 1


@pytest.mark.django_db
def test_a_token_and_the_same_persons_session_are_one_vote(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    _, request = held_run(desk, crew)
    approver = add_member(org, "approver")
    assert vote(token_for(org, "approver", member=approver), request.id).status_code == 200
    with pytest.raises(Conflict, match="already voted"):
        decisions.decide_approval(actor=member_actor(approver), approval_id=request.id, decision="approve")
    request.refresh_from_db()
    assert request.status == "pending"


@pytest.mark.django_db
def test_two_people_whose_tokens_share_a_name_are_two_votes(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    _, request = held_run(desk, crew)
    one, two = add_member(org, "approver"), add_member(org, "approver")
    assert vote(token_for(org, "approver", "ci", member=one), request.id).status_code == 200
    assert vote(token_for(org, "approver", "ci", member=two), request.id).status_code == 200
    request.refresh_from_db()
    assert request.status == "approved"
    assert sorted(request.votes.values_list("user_id", flat=True)) == sorted([one.user_id, two.user_id])


@pytest.mark.django_db
def test_an_actor_that_is_no_person_cannot_vote(desk, org):
    from apps.accounts.actors import system_actor

    _, request = held_run(desk, desk.refund_desk())
    with pytest.raises(PermissionDenied, match="Only a member"):
        decisions.decide_approval(actor=system_actor(org.id), approval_id=request.id, decision="approve")


@pytest.mark.django_db
def test_a_removed_members_token_stops_working_and_a_demoted_members_token_loses_rights(org, owner):
    leaving, demoted = add_member(org, "admin"), add_member(org, "admin")
    gone, weaker = token_for(org, "admin", member=leaving), token_for(org, "admin", member=demoted)
    for token in (gone, weaker):
        assert Client().get("/api/v1/tokens", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    accounts.remove_member(actor=member_actor(owner), member_id=leaving.id)
    accounts.change_role(actor=member_actor(owner), member_id=demoted.id, role="viewer")
    assert Client().get("/api/v1/me", headers={"Authorization": f"Bearer {gone}"}).status_code == 401
    answer = Client().get("/api/v1/tokens", headers={"Authorization": f"Bearer {weaker}"})
    assert answer.status_code == 403
    assert Client().get("/api/v1/me", headers={"Authorization": f"Bearer {weaker}"}).json()["role"] == "viewer"


@pytest.mark.django_db
def test_a_builder_holding_an_approver_token_cannot_approve(desk, org):
    _, request = held_run(desk, desk.refund_desk())
    builder = add_member(org, "builder")
    with pytest.raises(ValidationFailed, match="cannot be approver"):
        token_for(org, "approver", member=builder)
    token = token_for(org, "approver", member=add_member(org, "approver", email="later-builder@example.com"))
    member = builder.__class__.objects.get(user__email="later-builder@example.com")
    accounts.change_role(actor=desk.actor, member_id=member.id, role="builder")
    assert vote(token, request.id).status_code == 403


@pytest.mark.django_db
def test_the_token_list_says_whose_each_token_is(org, owner):
    approver = add_member(org, "approver")
    token_for(org, "approver", "theirs", member=approver)
    listed = Client().get("/api/v1/tokens", headers={"Authorization": f"Bearer {token_for(org, 'admin', 'mine')}"})
    holders = {t["name"]: t["member"] for t in listed.json()["items"]}
    assert holders == {"theirs": approver.user.email, "mine": owner.user.email}
    created = Client().post("/api/v1/tokens", {"name": "new", "role": "viewer"}, content_type="application/json",
                            headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})
    assert created.status_code == 201 and created.json()["token"]["member"] == owner.user.email


@pytest.mark.django_db
def test_with_separation_of_duties_the_starter_approves_on_no_path(desk, org):
    crew = desk.refund_desk(separation_of_duties=True)
    starter = add_member(org, "admin")
    _, request = held_run(desk, crew, actor=member_actor(starter))
    assert request.separation_of_duties
    with pytest.raises(PermissionDenied, match="separates duties"):
        decisions.decide_approval(actor=member_actor(starter), approval_id=request.id, decision="approve")
    answer = vote(token_for(org, "admin", member=starter), request.id)
    assert answer.status_code == 403 and "separates duties" in answer.json()["detail"]
    browser = Client()
    browser.force_login(starter.user)
    page = browser.get("/inbox/")
    assert "separates duties" in page.content.decode()
    request.refresh_from_db()
    assert request.status == "pending" and request.votes.count() == 0
    other = add_member(org, "approver")
    assert vote(token_for(org, "approver", member=other), request.id).status_code == 200


@pytest.mark.django_db
def test_without_separation_of_duties_the_starter_may_approve_a_write(desk, org):
    starter = member_actor(add_member(org, "admin"))
    _, request = held_run(desk, desk.refund_desk(), actor=starter)
    assert not request.separation_of_duties
    assert decisions.decide_approval(actor=starter, approval_id=request.id, decision="approve").status == "approved"


@pytest.mark.django_db
def test_no_standing_approval_from_or_for_a_call_that_needs_several_people(desk, org):
    crew = desk.refund_desk(approvals_required=2)
    _, request = held_run(desk, crew)
    one = member_actor(add_member(org, "approver"))
    with pytest.raises(ValidationFailed, match="2 people"):
        decisions.decide_approval(actor=one, approval_id=request.id, decision="approve", standing={"scope": "run"})
    single = desk.refund_desk(name="Single desk")
    _, lone = held_run(desk, single)
    decisions.decide_approval(actor=one, approval_id=lone.id, decision="approve",
                             standing={"scope": "agent_tool", "hours": 2})
    covered = dict(org_id=org.id, run_id=None, agent_id=lone.agent_id, tool_id=lone.tool_id, risk="write",
                   arguments=A1001)
    assert standing.matching_standing(**covered) is not None
    assert standing.matching_standing(**covered, required_approvals=2) is None
    assert standing.matching_standing(**covered, not_by_user_id=one.user_id) is None


@pytest.mark.django_db
def test_a_starters_own_standing_approval_does_not_cover_their_run_when_duties_are_separated(desk, org):
    approver = member_actor(add_member(org, "admin"))
    first = desk.refund_desk(name="Desk")
    _, request = held_run(desk, first)
    decisions.decide_approval(actor=approver, approval_id=request.id, decision="approve",
                             standing={"scope": "agent_tool", "hours": 2})
    from apps.crews import services as crews

    crews.update_crew(actor=desk.actor, crew_id=first.id, separation_of_duties=True)
    run = services.start_run(actor=approver, crew_id=first.id, inputs=A1001, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert run.status == "waiting"  # held again: the starter's standing approval is not someone else's
    assert ApprovalRequest.objects.filter(run_id=run.id, status="pending").exists()
