from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from apps.accounts.models import ApiToken, Membership, Organization
from apps.accounts.selectors import active_token_for

pytestmark = pytest.mark.django_db


def test_create_org_prints_the_new_owners_password(capsys):
    call_command("create_org", "initech", "--owner", "boss@initech.example")
    out = capsys.readouterr().out
    org = Organization.objects.get(slug="initech")
    owner = Membership.objects.get(org=org)
    password = out.split("Password for boss@initech.example: ")[1].strip()
    assert owner.role == "owner"
    assert owner.user.check_password(password)


def test_create_org_refuses_a_taken_slug(capsys):
    call_command("create_org", "initech", "--owner", "a@initech.example")
    with pytest.raises(CommandError, match="taken"):
        call_command("create_org", "initech", "--owner", "b@initech.example")


def test_create_token_prints_a_working_token(capsys, org):
    call_command("create_token", org.slug, "--role", "approver", "--name", "ops")
    raw = capsys.readouterr().out.strip()
    token = active_token_for(raw)
    assert (token.org_id, token.role, token.name) == (org.id, "approver", "ops")


def test_create_token_for_an_unknown_org_fails_clearly():
    with pytest.raises(CommandError, match="No organisation"):
        call_command("create_token", "nope", "--role", "viewer")


def test_seed_demo_is_idempotent(capsys, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo")
    first = capsys.readouterr().out
    counts = (Organization.objects.count(), Membership.objects.count(), ApiToken.objects.count())
    call_command("seed_demo")
    second = capsys.readouterr().out
    assert (Organization.objects.count(), Membership.objects.count(), ApiToken.objects.count()) == counts
    roles = dict(Membership.objects.filter(org__slug="demo").values_list("user__email", "role"))
    assert roles["owner@demo.example"] == "owner"
    assert roles["approver@demo.example"] == "approver"
    assert roles["viewer@demo.example"] == "viewer"
    # The same logins are printed both times, and they work.
    line = next(x for x in first.splitlines() if "approver@demo.example" in x)
    assert line in second
    password = line.split()[-1]
    assert Membership.objects.get(org__slug="demo", user__email="approver@demo.example").user.check_password(password)
