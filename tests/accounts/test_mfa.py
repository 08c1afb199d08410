"""Two-factor authentication (allauth.mfa): TOTP set up from the account menu, asked for at sign-in,
recovery codes that work once, and an organisation requiring it of owners, admins and approvers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
import time

from django.test import Client

from apps.accounts.models import Organization
from tests.factories import PASSWORD


def totp(secret: str, step: int = 0) -> str:
    """RFC 6238 (SHA-1, 6 digits, 30 s), written out so the test does not trust the code under test."""
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    digest = hmac.new(key, struct.pack(">Q", int(time.time()) // 30 + step), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    return f"{(struct.unpack('>I', digest[offset:offset + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"


def sign_in(client, email: str) -> object:
    return client.post("/login/", {"username": email, "password": PASSWORD})


def set_up_totp(client, email: str) -> str:
    """Signs in with the password and activates an authenticator app; returns its secret."""
    assert sign_in(client, email).status_code == 302
    page = client.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200, page.get("Location")
    secret = re.search(r'id="authenticator_secret"[^>]*value="([A-Z2-7]+)"', page.content.decode()).group(1)
    done = client.post("/accounts/2fa/totp/activate/", {"code": totp(secret)})
    assert done.status_code == 302, done.content[:1500]
    return secret


def test_totp_is_asked_for_at_sign_in_once_set_up(owner):
    email = owner.user.email
    secret = set_up_totp(Client(), email)

    person = Client()
    step = sign_in(person, email)
    assert step.status_code == 302 and step["Location"] == "/accounts/2fa/authenticate/"
    assert person.get("/").status_code == 302  # not signed in until the code
    wrong = person.post("/accounts/2fa/authenticate/", {"code": "000000" if totp(secret, 1) != "000000" else "111111"})
    assert wrong.status_code == 200 and "_auth_user_id" not in person.session
    signed = person.post("/accounts/2fa/authenticate/", {"code": totp(secret, 1)})
    assert signed.status_code == 302
    assert person.get("/").status_code == 200


def test_a_recovery_code_works_once(owner):
    email = owner.user.email
    setup = Client()
    set_up_totp(setup, email)
    page = setup.get("/accounts/2fa/recovery-codes/").content.decode()
    shown = re.search(r'<textarea[^>]*id="recovery_codes"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    codes = shown.split()
    assert len(codes) == 10, page[:3000]
    code = codes[0]
    first = Client()
    sign_in(first, email)
    assert first.post("/accounts/2fa/authenticate/", {"code": code}).status_code == 302
    again = Client()
    sign_in(again, email)
    refused = again.post("/accounts/2fa/authenticate/", {"code": code})
    assert refused.status_code == 200 and "_auth_user_id" not in again.session


def test_an_org_can_require_it_of_approvers_and_admins(client, owner, approver, viewer):
    client.force_login(owner.user)
    assert client.post("/settings/sso/mfa/", {"mfa_required": "on"}).status_code == 302
    assert Organization.objects.get(pk=owner.org_id).mfa_required

    person = Client()
    sign_in(person, approver.user.email)
    inbox = person.get("/inbox/")
    assert inbox.status_code == 302 and inbox["Location"] == "/accounts/2fa/totp/activate/"
    decide = person.post("/inbox/00000000-0000-0000-0000-000000000000/decide/", {"decision": "approve"})
    assert decide.status_code == 302 and decide["Location"] == "/accounts/2fa/totp/activate/"
    assert "requires two-factor authentication for approvers" in person.get(
        "/accounts/2fa/totp/activate/").content.decode()

    onlooker = Client()
    sign_in(onlooker, viewer.user.email)
    assert onlooker.get("/inbox/").status_code == 200  # viewers are not asked

    secret = set_up_totp(Client(), approver.user.email)
    after = Client()
    sign_in(after, approver.user.email)
    assert after.post("/accounts/2fa/authenticate/", {"code": totp(secret, 1)}).status_code == 302
    assert after.get("/inbox/").status_code == 200

