"""A person in a real browser signs in through their organisation's identity provider (a real OIDC
provider on loopback) and sets up two-factor authentication."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.accounts.models import Membership
from apps.accounts.roles import Role
from tests.accounts.oidc_idp import IDP_PASSWORD, oidc_provider
from tests.accounts.test_mfa import totp
from tests.factories import PASSWORD, make_user, owner_of

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def idp(live_url, tmp_path_factory):
    with oidc_provider(tmp_path_factory.mktemp("idp"), [f"{live_url}/accounts/oidc/acme/login/callback/"]) as p:
        yield p


def test_sign_in_with_the_organisations_identity_provider(page: Page, live_url, idp):
    owner = make_user("owner@acme.test")
    org, _, _ = services.create_organization(name="Acme", slug="acme", owner_email=owner.email)
    services.configure_identity_provider(
        actor=member_actor(owner_of(org)), name="Acme IdP", issuer_url=idp.url, client_id="airlock",
        client_secret="airlock-secret", allowed_domains="acme.test", default_role=Role.APPROVER)

    page.goto(f"{live_url}/login/")
    page.get_by_role("button", name="Sign in with Acme IdP").click()
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in to the IdP").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(page.locator("body")).to_contain_text("ada@acme.test")
    assert Membership.objects.get(org=org, user__username="ada@acme.test").role == Role.APPROVER


def test_set_up_two_factor_authentication_and_use_it(page: Page, live_url, owner):
    email = owner.user.email
    page.goto(f"{live_url}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()

    page.goto(f"{live_url}/accounts/2fa/")
    expect(page.get_by_text("An authenticator app is not active.")).to_be_visible()
    page.get_by_role("link", name="Activate").click()
    secret = page.locator("#authenticator_secret").input_value()
    page.locator("input[name=code]").fill(totp(secret))
    page.get_by_role("button", name="Activate").click()
    expect(page.locator("#recovery_codes")).to_be_visible()

    page.context.clear_cookies()
    page.goto(f"{live_url}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{live_url}/accounts/2fa/authenticate/")
    page.locator("input[name=code]").fill(totp(secret, 1))
    page.get_by_role("button", name="Sign In").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
