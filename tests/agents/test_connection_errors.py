"""The connection test shows the provider's error in its own words, without any of the organisation's
secrets: the connection's key in any spelling, another secret of the org the provider quotes, or anything
shaped like a credential."""

from __future__ import annotations

import secrets
from urllib.parse import quote

import pytest

from apps.agents import services
from apps.agents.models import LlmConnection
from apps.registry.models import McpServer
from tests.agents.factories import owner_actor
from tests.agents.fake_llm import FakeLLM

pytestmark = pytest.mark.django_db


def test_a_providers_error_quoting_the_orgs_secrets_is_shown_and_stored_without_them(org):
    key, env_value = f"cnry-{secrets.token_hex(10)}/{secrets.token_hex(3)}", f"env-{secrets.token_hex(12)}"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhaXJsb2NrIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    McpServer.objects.create(org=org, name="crm", transport="stdio", command="x", trust_tier="internal",
                             env={"CRM_TOKEN": env_value})
    with FakeLLM("openai") as fake:
        fake.replies.append((401, {"error": {"message": f"Incorrect API key provided: {quote(key, safe='')}; "
                                                        f"proxy saw {env_value} and session {jwt}"}}))
        connection = services.create_connection(actor=owner_actor(org), name="Proxy", provider="openai_compatible",
                                                base_url=fake.base_url, api_key=key, default_model="gpt-test")
        result = services.test_connection(actor=owner_actor(org), connection_id=connection.id)
    assert not result.ok
    assert result.message.startswith("127.0.0.1")
    assert "HTTP 401: Incorrect API key provided: [redacted]" in result.message
    stored = LlmConnection.objects.get(id=connection.id).last_check_message
    for text in (result.message, stored):
        assert quote(key, safe="") not in text and env_value not in text and jwt not in text
        assert text.count("[redacted]") == 3
