"""Membership rules: who may add, change and remove whom."""

from __future__ import annotations

import pytest

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.accounts.models import Membership
from apps.audit.models import AuditEvent
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def test_an_admin_adds_a_new_person_who_gets_a_one_time_password(admin):
    membership, password = services.add_member(actor=member_actor(admin), email="New.Person@Example.com",
                                               role="builder")
    assert membership.user.email == "new.person@example.com"
    assert password and membership.user.check_password(password)
    event = AuditEvent.objects.get(org=admin.org, action="member.added", target_label="new.person@example.com")
    assert event.data == {"email": "new.person@example.com", "role": "builder", "new_user": True}
    assert password not in str(event.data)


def test_an_existing_user_is_added_without_a_new_password(owner, outsider):
    membership, password = services.add_member(actor=member_actor(owner), email=outsider.user.email, role="viewer")
    assert password is None
    assert membership.user == outsider.user


def test_adding_someone_twice_is_a_conflict(owner, viewer):
    with pytest.raises(Conflict):
        services.add_member(actor=member_actor(owner), email=viewer.user.email, role="viewer")


def test_builders_cannot_manage_members(builder):
    with pytest.raises(PermissionDenied):
        services.add_member(actor=member_actor(builder), email="x@example.com", role="viewer")


def test_an_unknown_role_names_the_field(owner):
    with pytest.raises(ValidationFailed) as error:
        services.add_member(actor=member_actor(owner), email="x@example.com", role="emperor")
    assert "role" in error.value.errors


def test_the_last_owner_cannot_be_removed_or_demoted(owner):
    with pytest.raises(Conflict):
        services.remove_member(actor=member_actor(owner), member_id=owner.id)
    with pytest.raises(Conflict):
        services.change_role(actor=member_actor(owner), member_id=owner.id, role="admin")
    assert Membership.objects.get(pk=owner.pk).role == "owner"


def test_an_owner_can_step_down_once_there_is_another(owner, admin):
    services.change_role(actor=member_actor(owner), member_id=admin.id, role="owner")
    services.change_role(actor=member_actor(owner), member_id=owner.id, role="viewer")
    assert Membership.objects.get(pk=owner.pk).role == "viewer"


def test_a_removed_member_loses_access_but_keeps_their_account(owner, viewer):
    services.remove_member(actor=member_actor(owner), member_id=viewer.id)
    assert not Membership.objects.filter(pk=viewer.pk).exists()
    viewer.user.refresh_from_db()
    assert AuditEvent.objects.filter(org=owner.org, action="member.removed").count() == 1


def test_members_of_another_org_are_not_found(owner, outsider):
    with pytest.raises(NotFound):
        services.change_role(actor=member_actor(owner), member_id=outsider.id, role="viewer")
    with pytest.raises(NotFound):
        services.remove_member(actor=member_actor(owner), member_id=outsider.id)


def test_sign_up_creates_an_org_the_user_owns(db):
    user, org = services.sign_up(email="founder@example.com", password="a-long-unusual-passphrase", org_name="Initech")
    assert Membership.objects.get(org=org, user=user).role == "owner"
    assert org.slug == "initech"


def test_sign_up_refuses_a_weak_password_and_a_taken_email(db):
    make_user("taken@example.com")
    with pytest.raises(ValidationFailed) as weak:
        services.sign_up(email="new@example.com", password="password", org_name="X")
    assert "password" in weak.value.errors
    with pytest.raises(ValidationFailed) as taken:
        services.sign_up(email="taken@example.com", password="a-long-unusual-passphrase", org_name="X")
    assert "email" in taken.value.errors
