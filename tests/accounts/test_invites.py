"""Invites by emailed link (single-use, expiring, revocable) and password reset, through a real SMTP
server on loopback."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from apps.accounts.models import Invite, Membership
from apps.accounts.roles import Role
from tests.factories import PASSWORD, make_user
from tests.smtp import smtp_server

NEW_PASSWORD = "a-brand-new-passphrase-9"


@pytest.fixture
def inbox():
    with smtp_server() as server, override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=server.port, EMAIL_USE_TLS=False, EMAIL_HOST_USER="", EMAIL_HOST_PASSWORD=""):
        yield server


def invite(client, owner, inbox, email="newcomer@example.com", role=Role.APPROVER,
           capture=None) -> str:
    """Sends an invite from Settings → Members and returns the link path from the mail."""
    client.force_login(owner.user)
    with capture(execute=True):
        page = client.post("/settings/members/", {"action": "invite", "invite-email": email, "invite-role": role})
    assert page.status_code == 200, page.content[:2000]
    assert f"Invite sent to {email}" in page.content.decode()
    message = inbox.wait_for()[-1]
    assert message["To"] == email and owner.org.name in message["Subject"]
    return re.search(r"http://testserver(/invite/\S+/)", inbox.body()).group(1)


def test_an_invite_link_creates_the_account_and_membership_once(client, owner, inbox,
                                                                 django_capture_on_commit_callbacks):
    link = invite(client, owner, inbox, capture=django_capture_on_commit_callbacks)
    members_page = client.get("/settings/members/").content.decode()
    assert "Pending invites" in members_page and "newcomer@example.com" in members_page

    guest = Client()
    page = guest.get(link)
    assert page.status_code == 200
    assert f"Join {owner.org.name}" in page.content.decode() and "Approver" in page.content.decode()
    joined = guest.post(link, {"password": NEW_PASSWORD})
    assert joined.status_code == 302 and joined["Location"] == "/"
    assert Membership.objects.get(org=owner.org, user__username="newcomer@example.com").role == Role.APPROVER
    assert "newcomer@example.com" in guest.get("/").content.decode()

    again = Client().get(link)
    assert again.status_code == 410 and "has been used already" in again.content.decode()
    assert "newcomer@example.com" not in client.get("/settings/members/").content.decode().split("People in")[0]


def test_an_existing_account_signs_in_then_accepts(client, owner, inbox, django_capture_on_commit_callbacks):
    person = make_user("known@example.com")
    link = invite(client, owner, inbox, email=person.email, role=Role.VIEWER,
                  capture=django_capture_on_commit_callbacks)
    guest = Client()
    assert "Sign in to accept" in guest.get(link).content.decode()
    guest.force_login(make_user("someone-else@example.com"))
    wrong = guest.post(link)
    assert wrong.status_code == 422 and "This invite is for known@example.com" in wrong.content.decode()
    guest.force_login(person)
    assert guest.post(link).status_code == 302
    assert Membership.objects.get(org=owner.org, user=person).role == Role.VIEWER


def test_a_revoked_or_expired_invite_does_not_work(client, owner, inbox, django_capture_on_commit_callbacks):
    link = invite(client, owner, inbox, capture=django_capture_on_commit_callbacks)
    pending = Invite.objects.get(email="newcomer@example.com")
    client.post(f"/settings/members/invites/{pending.id}/revoke/")
    revoked = Client().post(link, {"password": NEW_PASSWORD})
    assert revoked.status_code == 410 and "This invite was revoked" in revoked.content.decode()
    assert not Membership.objects.filter(user__username="newcomer@example.com").exists()

    link = invite(client, owner, inbox, email="late@example.com", capture=django_capture_on_commit_callbacks)
    Invite.objects.filter(email="late@example.com").update(expires_at=timezone.now() - timedelta(minutes=1))
    expired = Client().post(link, {"password": NEW_PASSWORD})
    assert expired.status_code == 410 and "This invite has expired" in expired.content.decode()


def test_only_members_managers_invite_and_never_above_their_role(client, admin, viewer):
    client.force_login(viewer.user)
    assert client.post("/settings/members/", {"action": "invite", "invite-email": "x@example.com",
                                              "invite-role": Role.VIEWER}).status_code == 403
    client.force_login(admin.user)
    page = client.post("/settings/members/", {"action": "invite", "invite-email": "x@example.com",
                                                      "invite-role": Role.OWNER})
    assert page.status_code == 422 and "Only an owner can grant" in page.content.decode()
    assert not Invite.objects.exists()


def test_password_reset_by_email(client, owner, inbox):
    client.post("/account/reset/", {"email": owner.user.email})
    inbox.wait_for()
    link = re.search(r"http://testserver(/account/reset/\S+/)", inbox.body()).group(1)
    form_page = client.get(link, follow=True)
    assert "New password" in form_page.content.decode() or "new password" in form_page.content.decode().lower()
    done = client.post(form_page.redirect_chain[-1][0] if form_page.redirect_chain else link,
                       {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert done.status_code == 302
    fresh = Client()
    assert fresh.post("/login/", {"username": owner.user.email, "password": PASSWORD}).status_code == 200
    assert fresh.post("/login/", {"username": owner.user.email, "password": NEW_PASSWORD}).status_code == 302
