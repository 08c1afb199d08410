"""The pages people use: sign in, the shell, members and tokens, audit, and what others can't see."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from apps.accounts.models import ApiToken, Membership
from apps.audit.models import AuditEvent
from tests.conftest import signed_in
from tests.factories import PASSWORD, add_member, make_org

pytestmark = pytest.mark.django_db


def test_signing_in_lands_on_the_dashboard_with_the_navigation(client, owner):
    response = client.post("/login/", {"username": owner.user.email.upper(), "password": PASSWORD}, follow=True)
    page = response.content.decode()
    assert response.status_code == 200
    for label in ("Dashboard", "Servers", "Agents", "Crews", "Runs", "Inbox", "Costs", "Audit", "Settings"):
        assert f'<span class="nav-link-title">{label}</span>' in page
    assert 'id="inbox-badge"' in page
    assert f'ws-connect="/ws/org/{owner.org_id}/"' in page


def test_a_wrong_password_shows_an_error_and_is_audited(client, owner):
    response = client.post("/login/", {"username": owner.user.email, "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct" in response.content.decode()
    assert AuditEvent.objects.filter(org=owner.org, action="auth.sign_in_failed").exists()


def test_pages_need_a_signed_in_member(client):
    response = client.get("/settings/members/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_sign_up_creates_an_org_and_signs_in(client, settings, db):
    settings.AIRLOCK_ALLOW_SIGNUP = True
    response = client.post("/signup/", {"email": "new@example.com", "password": "a-long-unusual-passphrase",
                                        "org_name": "Initech"}, follow=True)
    assert "Initech" in response.content.decode()
    assert Membership.objects.get(user__email="new@example.com").role == "owner"


def test_sign_up_shows_field_errors_and_keeps_input(client, settings, db):
    settings.AIRLOCK_ALLOW_SIGNUP = True
    response = client.post("/signup/", {"email": "new@example.com", "password": "short", "org_name": "Initech"})
    page = response.content.decode()
    assert 'class="form-control is-invalid"' in page
    assert 'value="new@example.com"' in page
    assert 'value="Initech"' in page


def test_sign_up_can_be_turned_off(client, settings, db):
    settings.AIRLOCK_ALLOW_SIGNUP = False
    assert client.get("/signup/").status_code == 404
    assert "/signup/" not in client.get("/login/").content.decode()


def test_password_reset_sends_a_working_link(client, owner):
    client.post("/account/reset/", {"email": owner.user.email})
    link = re.search(r"http://testserver(/account/reset/\S+/)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    response = client.post(form.redirect_chain[-1][0], {"new_password1": "another-long-passphrase",
                                                        "new_password2": "another-long-passphrase"}, follow=True)
    assert "Password set" in response.content.decode()
    owner.user.refresh_from_db()
    assert owner.user.check_password("another-long-passphrase")


def test_the_org_switcher_changes_the_current_org(client, owner):
    other = make_org("Globex")
    add_member(other, "viewer", email=owner.user.email)
    client.force_login(owner.user)
    assert "Globex" in client.get("/").content.decode()  # listed in the switcher
    client.post("/orgs/switch/", {"org_id": str(other.id)})
    page = client.get("/settings/members/").content.decode()
    assert "People in Globex" in page


def test_switching_to_an_org_you_are_not_in_is_not_found(client, owner):
    other = make_org("Globex")
    client.force_login(owner.user)
    assert client.post("/orgs/switch/", {"org_id": str(other.id)}).status_code == 404


def test_an_admin_adds_a_member_and_sees_the_password_once(client, admin):
    client.force_login(admin.user)
    response = client.post("/settings/members/", {"email": "fresh@example.com", "role": "approver"},
                           HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Give fresh@example.com this password" in page
    password = re.search(r'<code id="new-password"[^>]*>([^<]+)</code>', page).group(1)
    assert Membership.objects.get(user__email="fresh@example.com").user.check_password(password)
    assert password not in client.get("/settings/members/").content.decode()


def test_a_bad_member_form_shows_the_error_next_to_the_field(client, admin):
    client.force_login(admin.user)
    response = client.post("/settings/members/", {"email": "not-an-email", "role": "viewer"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert 'id="id_email-error"' in response.content.decode()


def test_removing_the_last_owner_says_why(client, owner):
    client.force_login(owner.user)
    page = client.post(f"/settings/members/{owner.id}/remove/", HTTP_HX_REQUEST="true").content.decode()
    assert "The last owner cannot be removed." in page
    assert Membership.objects.filter(pk=owner.pk).exists()


def test_viewers_see_members_but_cannot_manage_them(client, viewer):
    client.force_login(viewer.user)
    page = client.get("/settings/members/").content.decode()
    assert viewer.user.email in page
    assert "Add a member" not in page
    assert client.post("/settings/members/", {"email": "x@example.com", "role": "viewer"}).status_code == 403
    assert client.get("/settings/tokens/").status_code == 403
    assert client.get("/audit/").status_code == 403


def test_another_orgs_member_is_not_found(client, owner, outsider):
    client.force_login(owner.user)
    assert client.post(f"/settings/members/{outsider.id}/role/", {"role": "viewer"}).status_code == 404
    assert client.post(f"/settings/members/{outsider.id}/remove/").status_code == 404
    assert Membership.objects.get(pk=outsider.pk).role == "owner"


def test_a_new_token_is_shown_once_and_then_only_its_prefix(client, admin):
    client.force_login(admin.user)
    page = client.post("/settings/tokens/", {"name": "deploys", "role": "builder"}, HTTP_HX_REQUEST="true")
    raw = re.search(r'<code id="new-token"[^>]*>(al_[^<]+)</code>', page.content.decode()).group(1)
    token = ApiToken.objects.get(name="deploys")
    listing = client.get("/settings/tokens/").content.decode()
    assert raw not in listing
    assert f"{token.prefix}…" in listing
    assert client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {raw}").json()["role"] == "builder"


def test_revoking_a_token_from_the_page(client, admin):
    client.force_login(admin.user)
    client.post("/settings/tokens/", {"name": "old", "role": "viewer"})
    token = ApiToken.objects.get(name="old")
    page = client.post(f"/settings/tokens/{token.id}/revoke/", HTTP_HX_REQUEST="true").content.decode()
    assert "revoked" in page
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_the_audit_page_filters_and_shows_the_chain_is_intact(client, owner):
    client.force_login(owner.user)
    client.post("/settings/members/", {"email": "a@example.com", "role": "viewer"})
    page = client.get("/audit/?action=member.added").content.decode()
    assert "Chain intact" in page
    assert "member.added" in page
    assert "<code>org.created</code>" not in page


def test_the_costs_page_says_when_nothing_was_spent(client, viewer):
    client.force_login(viewer.user)
    page = client.get("/costs/").content.decode()
    assert "No model calls in this range." in page
    assert "Save budget" not in page  # viewers read budgets, admins change them


def test_healthz_answers_without_signing_in(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_no_main_page_shows_a_value_as_python(client, owner):
    """Every page of the app with one of each object on it: values read as JSON (true, "x"), never
    as Python ('x': True)."""
    from tests.browser.test_accessibility import PAGES
    from tests.runs.test_page_presentation import PYTHON_VALUE
    from tests.security.routes import populate

    world = populate(owner.org)
    signed_in(client, owner)
    pages = [*PAGES, "/runs/{run_id}/fork/", "/servers/{server_id}/edit/", "/settings/sso/"]
    shown = {path: client.get(path.format(**world.ids)).content.decode() for path in pages}
    assert {path: PYTHON_VALUE.findall(html) for path, html in shown.items() if PYTHON_VALUE.search(html)} == {}
