"""An admin gives a member who lost their password a new one-time password, shown once like a new
member's; never their own, an owner's (unless an owner), or someone who also belongs elsewhere."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditEvent
from tests.conftest import signed_in
from tests.factories import PASSWORD, add_member, make_org

pytestmark = pytest.mark.django_db


def _reset(client, member):
    return client.post(f"/settings/members/{member.id}/reset-password/", HTTP_HX_REQUEST="true")


def test_an_admin_resets_a_members_password_and_sees_it_once(client, admin, builder):
    signed_in(client, admin)
    page = client.get("/settings/members/").content.decode()
    assert f'aria-label="Reset the password of {builder.user.email}"' in page
    html = _reset(client, builder).content.decode()
    assert f"Give {builder.user.email} this password" in html
    password = html.split('id="new-password" class="secret-once fs-3">')[1].split("</code>")[0]
    assert len(password) >= 12
    builder.user.refresh_from_db()
    assert builder.user.check_password(password) and not builder.user.check_password(PASSWORD)
    assert AuditEvent.objects.filter(org=admin.org, action="member.password_reset",
                                     target_label=builder.user.email).exists()
    assert password not in client.get("/settings/members/").content.decode()  # shown once
    assert password not in client.get("/audit/").content.decode()


def test_a_reset_password_signs_in(client, admin, builder):
    password = _reset(signed_in(client, admin), builder).content.decode().split(
        'id="new-password" class="secret-once fs-3">')[1].split("</code>")[0]
    client.logout()
    signed = client.post("/login/", {"username": builder.user.email, "password": password})
    assert signed.status_code == 302


def test_an_admin_cannot_reset_an_owner_or_themselves(client, admin, owner):
    signed_in(client, admin)
    page = client.get("/settings/members/").content.decode()
    assert f'aria-label="Reset the password of {admin.user.email}"' not in page
    assert "Only an owner" in _reset(client, owner).content.decode()
    assert "Change your own password" in _reset(client, admin).content.decode()
    owner.user.refresh_from_db()
    assert owner.user.check_password(PASSWORD)


def test_nobody_resets_a_person_who_also_belongs_to_another_organisation(client, admin, builder):
    add_member(make_org("Globex"), "viewer", email=builder.user.email)
    html = _reset(signed_in(client, admin), builder).content.decode()
    assert "also belongs to another organisation" in html and "this password" not in html
    builder.user.refresh_from_db()
    assert builder.user.check_password(PASSWORD)


def test_builders_cannot_reset_passwords(client, builder, viewer):
    assert _reset(signed_in(client, builder), viewer).status_code == 403
