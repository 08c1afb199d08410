"""A server's last words are kept in `last_error` without the organisation's secrets it printed: its
own environment and headers, and any other secret of the org (a key it read from a shared config file)."""

from __future__ import annotations

import secrets

import pytest

from apps.agents import services as agent_services
from apps.approvals.definition_changes import inbox
from apps.audit.models import AuditEvent
from apps.registry import services
from tests.registry.conftest import register_python

pytestmark = pytest.mark.django_db


def test_a_crash_that_prints_the_orgs_secrets_is_stored_without_them(actor, tmp_path):
    llm_key, own_token = f"cnry-{secrets.token_hex(10)}", f"tok-{secrets.token_hex(10)}"
    agent_services.create_connection(actor=actor, name="Shared key", provider="openai_compatible",
                                     base_url="http://127.0.0.1:9/v1", api_key=llm_key)
    config = tmp_path / "upstream.ini"
    config.write_text(f"[upstream]\nllm_key = {llm_key}\nservice_token = {own_token}\n")
    server = register_python(actor, "dumpy", "config_dump_on_start.py",
                             env={"CONFIG_FILE": str(config), "SERVICE_TOKEN": own_token})
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    server.refresh_from_db()
    assert report.status == "error" and server.last_error == report.error
    assert "fatal: upstream refused us" in server.last_error  # the server's words, still there
    audited = AuditEvent.objects.filter(org_id=actor.org_id, action="server.sync_failed").values_list("data")
    for text in (server.last_error, str(list(audited))):
        assert llm_key not in text and own_token not in text
        assert "[redacted]" in text


def test_no_piece_of_a_secret_is_left_where_the_servers_output_is_cut(actor, tmp_path):
    llm_key = f"cnry-{secrets.token_hex(14)}"
    agent_services.create_connection(actor=actor, name="Shared key", provider="openai_compatible",
                                     base_url="http://127.0.0.1:9/v1", api_key=llm_key)
    config = tmp_path / "upstream.ini"
    config.write_text(f"upstream {llm_key} " + "z" * 580)  # the last 600 characters start inside the key
    server = register_python(actor, "dumpy", "config_dump_on_start.py", env={"CONFIG_FILE": str(config)})
    services.sync_server(actor=actor, server_id=server.id, review=inbox)
    server.refresh_from_db()
    assert "z" * 500 in server.last_error
    assert llm_key[-12:] not in server.last_error
