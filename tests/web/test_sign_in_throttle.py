"""Browser sign-in throttling: wrong passwords lock an account and an address out for a while, with a
clear 429 page; owners, admins and operators can lift a lockout early; sign-up is off unless asked for."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from apps.audit.models import AuditEvent
from tests.factories import PASSWORD, add_member

pytestmark = pytest.mark.django_db

LIMIT = 5  # the default AIRLOCK_SIGNIN_FAILURE_LIMIT


def sign_in(email: str, password: str, ip: str = "10.0.0.1") -> tuple[Client, object]:
    client = Client(REMOTE_ADDR=ip)
    return client, client.post("/login/", {"username": email, "password": password})


def signed_in(client: Client) -> bool:
    return client.get("/settings/members/").status_code == 200


def fail(email: str, times: int, ip: str = "10.0.0.1") -> None:
    for _ in range(times):
        sign_in(email, "wrong-password", ip)


def test_after_too_many_wrong_passwords_even_the_right_one_gets_429(owner):
    fail(owner.user.email, LIMIT - 1)
    _, last_chance = sign_in(owner.user.email, "wrong-password")
    assert last_chance.status_code == 429
    client, response = sign_in(owner.user.email, PASSWORD)
    page = response.content.decode()
    assert response.status_code == 429
    assert "Too many sign-in attempts" in page
    assert "Try again in 15 minutes" in page
    assert response["Retry-After"] == str(15 * 60)
    assert not signed_in(client)


def test_fewer_failures_than_the_limit_still_sign_in(owner):
    fail(owner.user.email, LIMIT - 1)
    client, response = sign_in(owner.user.email, PASSWORD)
    assert response.status_code == 302
    assert signed_in(client)


def test_an_account_is_locked_from_every_address(owner):
    for n in range(LIMIT):
        fail(owner.user.email, 1, ip=f"10.0.1.{n}")
    client, response = sign_in(owner.user.email, PASSWORD, ip="192.0.2.7")
    assert response.status_code == 429
    assert not signed_in(client)


def test_the_account_counts_however_its_email_is_typed(owner):
    spellings = [owner.user.email.upper(), f"  {owner.user.email}", owner.user.email.title()]
    for n in range(LIMIT):
        fail(spellings[n % len(spellings)], 1, ip=f"10.0.2.{n}")
    _, response = sign_in(owner.user.email, PASSWORD, ip="192.0.2.8")
    assert response.status_code == 429


def test_an_address_is_locked_for_every_account(org, owner):
    for n in range(LIMIT):
        fail(f"guess{n}@example.com", 1, ip="203.0.113.9")
    _, from_there = sign_in(owner.user.email, PASSWORD, ip="203.0.113.9")
    assert from_there.status_code == 429
    client, elsewhere = sign_in(owner.user.email, PASSWORD, ip="198.51.100.1")
    assert elsewhere.status_code == 302
    assert signed_in(client)


def test_the_lockout_ends_after_its_cool_off(owner, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    fail(owner.user.email, LIMIT)
    assert sign_in(owner.user.email, PASSWORD)[1].status_code == 429
    time.sleep(1.2)
    client, response = sign_in(owner.user.email, PASSWORD)
    assert response.status_code == 302
    assert signed_in(client)


def test_an_admin_sees_and_lifts_a_members_lockout(org, admin):
    member = add_member(org, "builder")
    fail(member.user.email, LIMIT, ip="10.0.3.1")
    manager = Client()
    manager.force_login(admin.user)
    page = manager.get("/settings/members/").content.decode()
    assert "sign-in locked" in page
    assert f"Unlock sign-in for {member.user.email}" in page

    response = manager.post(f"/settings/members/{member.id}/unlock/", follow=True)
    assert f"{member.user.email} can sign in again." in response.content.decode()
    assert "sign-in locked" not in response.content.decode()
    assert AuditEvent.objects.filter(org=org, action="auth.unlocked", target_label=member.user.email).exists()
    client, signed = sign_in(member.user.email, PASSWORD, ip="10.0.3.1")
    assert signed.status_code == 302
    assert signed_in(client)


def test_only_an_owner_unlocks_an_owner_and_a_viewer_unlocks_nobody(org, owner, admin, viewer):
    fail(owner.user.email, LIMIT)
    manager = Client()
    manager.force_login(admin.user)
    response = manager.post(f"/settings/members/{owner.id}/unlock/", follow=True)
    assert "Only an owner can unlock an owner." in response.content.decode()
    onlooker = Client()
    onlooker.force_login(viewer.user)
    assert onlooker.post(f"/settings/members/{owner.id}/unlock/").status_code == 403
    assert sign_in(owner.user.email, PASSWORD)[1].status_code == 429


def test_the_operator_command_unlocks_an_account_and_an_address(owner, capsys):
    fail(owner.user.email, LIMIT, ip="203.0.113.20")
    call_command("unlock_sign_in", "--email", owner.user.email.upper())
    assert "Unlocked account" in capsys.readouterr().out
    # The address stays locked for other accounts until it is unlocked too.
    fail("someone@example.com", LIMIT, ip="203.0.113.20")
    assert sign_in(owner.user.email, PASSWORD, ip="203.0.113.20")[1].status_code == 429
    call_command("unlock_sign_in", "--ip", "203.0.113.20")
    assert sign_in(owner.user.email, PASSWORD, ip="203.0.113.20")[1].status_code == 302
    assert AuditEvent.objects.filter(org=owner.org, action="auth.unlocked").exists()


def test_the_operator_command_needs_an_account_or_an_address(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="Name an account"):
        call_command("unlock_sign_in")
