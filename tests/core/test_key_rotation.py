"""Rotating the encryption key as an operator would: new key first, re-encrypt, check, retire the old
key; every secret still reads (and is used) afterwards. Rotating SECRET_KEY with a fallback keeps people
signed in; without it they are signed out."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client, override_settings

from apps.accounts.actors import member_actor
from apps.agents import services as agent_services
from apps.agents.models import LlmConnection
from apps.core import encryption
from apps.notifications import services as notification_services
from apps.registry import services as registry_services
from apps.registry.models import McpServer

pytestmark = pytest.mark.django_db

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def with_keys(*keys: str):
    encryption._fernet.cache_clear()
    return override_settings(AIRLOCK_ENCRYPTION_KEYS=list(keys))


def raw(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL')
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture(autouse=True)
def fresh_keyring():
    encryption._fernet.cache_clear()
    yield
    encryption._fernet.cache_clear()


def test_rotate_re_encrypts_every_secret_and_the_old_key_can_be_retired(owner, capsys):
    actor = member_actor(owner)
    with with_keys(OLD):
        connection_row = agent_services.create_connection(actor=actor, name="Key", provider="openai",
                                                          api_key="sk-test-" + "k" * 40)
        server = registry_services.create_server(actor=actor, name="remote", transport="http", trust_tier="internal",
                                                 url="https://mcp.example.com/mcp",
                                                 headers={"Authorization": "Bearer s3cr3t-" + "h" * 20}, sync=False)
        notification_services.create_webhook(actor=actor, name="hook", url="https://hooks.example.com/x",
                                              events=["run.finished"])
    before = raw("agents_llmconnection", "api_key") + raw("registry_mcpserver", "headers")

    with with_keys(NEW, OLD):
        with pytest.raises(CommandError, match="Not ready to retire"):
            call_command("rotate_encryption_key", "--check")
        call_command("rotate_encryption_key")
        call_command("rotate_encryption_key", "--check")
    out = capsys.readouterr().out
    assert "agents_llmconnection.api_key" in out and "registry_mcpserver.headers" in out
    assert "notifications_webhook.secret" in out or "secret" in out
    assert "the older keys can be removed" in out
    after = raw("agents_llmconnection", "api_key") + raw("registry_mcpserver", "headers")
    assert set(after).isdisjoint(before)  # rewritten

    with with_keys(NEW):  # the old key is gone: everything still reads
        assert LlmConnection.objects.get(id=connection_row.id).api_key == "sk-test-" + "k" * 40
        assert McpServer.objects.get(id=server.id).headers == {"Authorization": "Bearer s3cr3t-" + "h" * 20}
        call_command("rotate_encryption_key", "--check")


def test_a_value_no_key_reads_is_reported_not_lost(owner, capsys):
    actor = member_actor(owner)
    with with_keys(OLD):
        agent_services.create_connection(actor=actor, name="Orphan", provider="openai", api_key="sk-test-" + "o" * 40)
    with with_keys(NEW), pytest.raises(CommandError, match="could not be read"):
        call_command("rotate_encryption_key")
    assert "no configured key reads it" in capsys.readouterr().err
    with with_keys(OLD):  # untouched: the right key still reads it
        assert LlmConnection.objects.get(name="Orphan").api_key == "sk-test-" + "o" * 40


def test_secret_key_rotation_keeps_sessions_with_the_fallback_only(client, owner):
    """A person who visits while the old key is a fallback moves to the new key (Django re-signs the
    session); one who never came back is signed out once the fallback is dropped."""
    old, new = settings.SECRET_KEY, "rotated-" + "n" * 50
    away = Client()
    client.force_login(owner.user)
    away.force_login(owner.user)
    with override_settings(SECRET_KEY=new, SECRET_KEY_FALLBACKS=[old]):
        assert client.get("/").status_code == 200  # still signed in
    with override_settings(SECRET_KEY=new, SECRET_KEY_FALLBACKS=[]):
        assert client.get("/").status_code == 200  # moved to the new key on that visit
        response = away.get("/")
        assert response.status_code == 302 and "login" in response["Location"]
