"""Failing API tokens are throttled by address and by token prefix: 429, a clear JSON error and
Retry-After, for wrong tokens and working ones alike while the lockout lasts."""

from __future__ import annotations

import secrets

import pytest
from django.test import Client, override_settings

from tests.factories import token_for

LIMITS = {"AIRLOCK_API_TOKEN_FAILURES": 3, "AIRLOCK_API_TOKEN_WINDOW_S": 60, "AIRLOCK_API_TOKEN_LOCKOUT_S": 120}


def address() -> str:
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"


def me(token: str, ip: str):
    return Client(REMOTE_ADDR=ip).get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_an_address_that_keeps_failing_is_locked_out_with_retry_after(org):
    ip, good = address(), token_for(org, "viewer")
    answers = [me(f"al_{secrets.token_urlsafe(32)}", ip) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 401, 429]
    locked = me(good, ip)  # even a working token, from that address, while the lockout lasts
    assert locked.status_code == 429
    assert "Too many failed API tokens from this address" in locked.json()["detail"]
    assert 110 <= int(locked["Retry-After"]) <= 120 and locked.json()["retry_after"] == int(locked["Retry-After"])
    assert me(good, address()).status_code == 200  # other addresses are not affected


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_guesses_at_one_prefix_from_many_addresses_lock_that_prefix(org):
    prefix = "al_" + secrets.token_urlsafe(8)[:7]
    answers = [me(prefix + secrets.token_urlsafe(30), address()) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 401, 429]
    again = me(prefix + secrets.token_urlsafe(30), address())
    assert again.status_code == 429 and "prefix" in again.json()["detail"] and again["Retry-After"]
    assert me(token_for(org, "viewer"), address()).status_code == 200  # a token with another prefix works


@pytest.mark.django_db
@override_settings(**LIMITS)
def test_working_tokens_never_count_as_failures(org):
    ip, good = address(), token_for(org, "viewer")
    assert all(me(good, ip).status_code == 200 for _ in range(6))


def test_the_openapi_schema_documents_the_429(client):
    schema = client.get("/api/v1/openapi.json").json()
    assert "429" in schema["paths"]["/api/v1/me"]["get"]["responses"]
