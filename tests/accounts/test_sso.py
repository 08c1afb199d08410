"""Single sign-on against a real OpenID Connect provider (django-oauth-toolkit in its own process):
discovery, PKCE, and the ID token's signature, audience, issuer, expiry and nonce; allowed domains,
just-in-time membership, "SSO required", and the write-only client secret."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from django.test import override_settings

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.accounts.models import IdentityProvider, Membership
from apps.accounts.roles import Role
from apps.audit.models import AuditEvent
from tests.accounts.oidc_idp import IDP_PASSWORD, oidc_provider
from tests.factories import PASSWORD, make_user, owner_of

CALLBACK = "http://testserver/accounts/oidc/acme/login/callback/"


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    with oidc_provider(tmp_path_factory.mktemp("idp"), [CALLBACK]) as provider:
        yield provider


@pytest.fixture
def acme(db):
    owner = make_user("owner@acme.test")
    org, _, _ = services.create_organization(name="Acme", slug="acme", owner_email=owner.email)
    return org


def configure(org, idp, client_id="airlock", **extra):
    actor = member_actor(owner_of(org))
    fields = {"name": "Acme IdP", "issuer_url": idp.url, "client_id": client_id,
              "client_secret": f"{client_id}-secret", "allowed_domains": "acme.test",
              "default_role": Role.BUILDER, **extra}
    return services.configure_identity_provider(actor=actor, **fields)


def _idp_sign_in(authorize_url: str, username: str) -> str:
    """Plays the person at the provider: signs in there and returns the redirect back to Airlock."""
    browser = requests.Session()
    url = authorize_url
    for _ in range(10):
        response = browser.get(url, allow_redirects=False)
        if response.status_code == 200 and "Test identity provider" in response.text:
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.text).group(1)
            response = browser.post(url, data={"csrfmiddlewaretoken": csrf, "username": username,
                                               "password": IDP_PASSWORD,
                                               "next": parse_qs(urlsplit(url).query)["next"][0]},
                                    allow_redirects=False)
        assert response.status_code == 302, response.text[:2000]
        url = urljoin(url, response.headers["Location"])
        if url.startswith("http://testserver/"):
            return url
    raise AssertionError("the provider never redirected back")


def sso(client, username="ada"):
    """Presses "Sign in with Acme IdP" and goes through the provider; the callback's response."""
    start = client.post("/accounts/oidc/acme/login/")
    assert start.status_code == 302, start.content[:2000]
    back = _idp_sign_in(start["Location"], username)
    return client.get(back.removeprefix("http://testserver"))


def test_sign_in_with_the_orgs_provider_makes_a_member_at_the_default_role(client, acme, idp):
    configure(acme, idp)
    page = client.get("/login/")
    assert "Sign in with Acme IdP" in page.content.decode()

    start = client.post("/accounts/oidc/acme/login/")
    query = parse_qs(urlsplit(start["Location"]).query)
    assert start["Location"].startswith(f"{idp.url}/authorize/")  # from discovery
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
    assert query["nonce"] and query["state"]

    done = client.get(_idp_sign_in(start["Location"], "ada").removeprefix("http://testserver"))
    assert done.status_code == 302 and done["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200 and "ada@acme.test" in home.content.decode()
    membership = Membership.objects.get(org=acme, user__username="ada@acme.test")
    assert membership.role == Role.BUILDER
    assert AuditEvent.objects.filter(org_id=acme.id, action="member.joined_via_sso").exists()


def test_an_existing_member_signs_in_as_themselves(client, acme, idp):
    configure(acme, idp)
    ada = make_user("ada@acme.test")
    services.add_member(actor=member_actor(owner_of(acme)), email=ada.email, role=Role.APPROVER)
    assert sso(client).status_code == 302
    assert int(client.session["_auth_user_id"]) == ada.pk
    assert Membership.objects.get(org=acme, user=ada).role == Role.APPROVER  # not reset to the default


@pytest.mark.parametrize(("client_id", "says"), [
    ("wrong-audience", "issued for another application"),
    ("expired", "has expired"),
    ("replayed-nonce", "its nonce differs"),
])
def test_a_bad_id_token_is_refused_with_the_reason(client, acme, idp, client_id, says):
    configure(acme, idp, client_id=client_id)
    refused = sso(client)
    assert refused.status_code == 403
    assert says in refused.content.decode()
    assert "_auth_user_id" not in client.session
    assert not Membership.objects.filter(org=acme, user__username="ada@acme.test").exists()


def test_a_provider_cannot_take_over_an_account_another_organisation_shares(client, acme, idp):
    """Any admin can point their provider at any domain: matched by email alone, an account that also
    belongs to another organisation is not handed over."""
    configure(acme, idp)
    services.create_organization(name="Globex", owner_email="ada@acme.test")
    refused = sso(client)
    assert refused.status_code == 403
    assert "ada@acme.test also belongs to Globex" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    assert not Membership.objects.filter(org=acme, user__username="ada@acme.test").exists()


def test_an_email_outside_the_allowed_domains_is_refused(client, acme, idp):
    configure(acme, idp)
    refused = sso(client, username="bob")
    assert refused.status_code == 403
    assert "bob@elsewhere.test is not in a domain Acme signs in with (acme.test)" in refused.content.decode()
    assert "_auth_user_id" not in client.session


def test_sso_required_turns_password_sign_in_off_for_members(client, acme, idp):
    configure(acme, idp, sso_required=True)
    page = client.post("/login/", {"username": "owner@acme.test", "password": PASSWORD})
    assert page.status_code == 200
    assert "Acme signs in with single sign-on, not a password: use “Sign in with Acme IdP”" in page.content.decode()
    assert "_auth_user_id" not in client.session
    other = make_user("someone@else.test")  # not a member of Acme: passwords still work
    assert client.post("/login/", {"username": other.email, "password": PASSWORD}).status_code == 302


def test_discovery_goes_through_the_egress_guard(client, acme, idp):
    configure(acme, idp)
    with override_settings(AIRLOCK_EGRESS_ALLOW_PRIVATE=False):
        refused = client.post("/accounts/oidc/acme/login/")
    assert refused.status_code == 403
    assert "Airlock may not reach the identity provider" in refused.content.decode()


def test_the_client_secret_is_write_only(client, acme, idp):
    configure(acme, idp)
    client.force_login(owner_of(acme).user)
    page = client.get("/settings/sso/").content.decode()
    assert "airlock-secret" not in page and "A client secret is stored" in page
    saved = client.post("/settings/sso/", {"name": "Acme Okta", "issuer_url": idp.url, "client_id": "airlock",
                                           "client_secret": "", "allowed_domains": "acme.test, Example.COM",
                                           "default_role": Role.VIEWER, "enabled": "on"})
    assert saved.status_code == 302
    idp_row = IdentityProvider.objects.get(org=acme)
    assert idp_row.client_secret == {"value": "airlock-secret"}  # kept
    assert idp_row.allowed_domains == ["acme.test", "example.com"]
    assert "airlock-secret" not in str(AuditEvent.objects.filter(action="sso.configured").values_list("data"))
    bad = client.post("/settings/sso/", {"name": "X", "issuer_url": "ftp://x", "client_id": "a",
                                         "allowed_domains": "not-a-domain", "default_role": Role.VIEWER})
    assert bad.status_code == 422
    body = bad.content.decode()
    assert "Give the issuer URL" in body and "is not an email domain" in body
