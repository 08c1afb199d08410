"""Tokens made before tokens had holders: the migration gives each one the member who created it,
else the organisation's earliest owner; one with nobody left to hold it stops working."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.test import Client

from apps.accounts.models import ApiToken
from tests.factories import add_member, owner_of, token_for

migration = importlib.import_module("apps.accounts.migrations.0002_api_token_member")


@pytest.mark.django_db
def test_old_tokens_get_their_creator_else_the_owner(org):
    creator, other = add_member(org, "admin"), add_member(org, "admin")
    by_creator, by_operator, by_leaver = (token_for(org, "viewer", name) for name in ("made", "cli", "left"))
    ApiToken.objects.filter(name="made").update(created_by=creator.user)
    ApiToken.objects.filter(name="left").update(created_by=other.user)
    other.delete()  # the creator of "left" is no longer a member
    ApiToken.objects.update(member=None)  # as the tokens were before the migration
    assert Client().get("/api/v1/me", headers={"Authorization": f"Bearer {by_creator}"}).status_code == 401

    migration.assign_members(apps, None)

    holders = dict(ApiToken.objects.values_list("name", "member__user__email"))
    assert holders == {"made": creator.user.email, "cli": owner_of(org).user.email,
                       "left": owner_of(org).user.email}
    for token in (by_creator, by_operator, by_leaver):
        assert Client().get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


@pytest.mark.django_db
def test_the_tokens_page_says_whose_each_token_is_and_a_token_made_there_is_yours(client, org):
    admin, approver = add_member(org, "admin"), add_member(org, "approver")
    token_for(org, "approver", "theirs", member=approver)
    client.force_login(admin.user)
    client.post("/settings/tokens/", {"name": "mine", "role": "builder"})
    assert ApiToken.objects.get(name="mine").member_id == admin.id
    holders = re.findall(r'data-testid="token-holder">([^<]+)<', client.get("/settings/tokens/").content.decode())
    assert sorted(holders) == sorted([admin.user.email, approver.user.email])
