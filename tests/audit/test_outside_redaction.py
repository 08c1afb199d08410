"""Text from outside (a provider's error, an MCP server's error, a webhook receiver's answer) loses the
organisation's own secrets, matched by value in the spellings a remote service uses, and anything shaped
like a credential, before it is stored; log lines lose credential shapes."""

from __future__ import annotations

import base64
import json
import logging
import secrets
from urllib.parse import quote, quote_plus

import pytest

from apps.agents.models import LlmConnection
from apps.audit.log_format import RedactingFormatter
from apps.audit.org_secrets import OrgSecrets, redact_outside
from apps.audit.redaction import redact, redact_text
from apps.notifications.models import Webhook
from apps.registry.models import McpServer
from tests.factories import make_org

pytestmark = pytest.mark.django_db


def unique(label: str) -> str:
    return f"{label}-{secrets.token_hex(8)}+{secrets.token_hex(4)}/x"


@pytest.fixture
def org_secrets(org):
    """One unique value in every secret field an organisation has."""
    values = {name: unique(name) for name in ("llm", "env", "header", "bearer", "webhook")}
    LlmConnection.objects.create(org=org, name="LLM", provider="openai_compatible", base_url="http://llm.test/v1",
                                 api_key=values["llm"])
    McpServer.objects.create(org=org, name="stdio", transport="stdio", command="x", trust_tier="internal",
                             env={"API_KEY": values["env"]})
    McpServer.objects.create(org=org, name="http", transport="http", url="http://mcp.test/mcp", trust_tier="internal",
                             headers={"X-Api-Key": values["header"], "Authorization": f"Bearer {values['bearer']}"})
    Webhook.objects.create(org=org, name="hook", url="http://hook.test/", events=["*"],
                           secret={"key": values["webhook"]})
    return values


def echoed(value: str) -> dict[str, str]:
    """How a remote service quotes back what it was sent."""
    return {"plain": f"Incorrect API key provided: {value}.", "url": f"GET /v1?key={quote(value, safe='')} 401",
            "url_plus": f"query was q={quote_plus(value)}", "json": json.dumps({"error": {"got": value}}),
            "hex": f"digest of {value.encode().hex()}",
            "basic": "Authorization: Basic " + base64.b64encode(f"user:{value}".encode()).decode(),
            "b64url": "token " + base64.urlsafe_b64encode(b"xy" + value.encode()).decode()}


def test_every_secret_of_the_org_is_masked_in_every_spelling(org, org_secrets):
    for field, value in org_secrets.items():
        for spelling, text in echoed(value).items():
            clean = redact_outside(text, org_id=org.id)
            assert value not in clean, (field, spelling)
            assert not [form for form in echoed(value) if echoed(value)[form] in clean and form != "plain"]
            for form in (quote(value, safe=""), value.encode().hex(), json.dumps(value)[1:-1]):
                assert form not in clean, (field, spelling, clean)
            assert "[redacted]" in clean, (field, spelling)
    quoted = redact_outside(echoed(org_secrets["llm"])["plain"], org_id=org.id)
    assert quoted == "Incorrect API key provided: [redacted]."  # the rest of the sentence stays readable


def test_a_whole_error_result_is_masked_inside(org, org_secrets):
    payload = {"text": f"failed with {org_secrets['env']}", "is_error": True,
               "structured": {"detail": [f"header {org_secrets['header']}"]}}
    clean = OrgSecrets(org.id).redact_all(payload)
    assert org_secrets["env"] not in json.dumps(clean) and org_secrets["header"] not in json.dumps(clean)
    assert clean["is_error"] is True and clean["text"] == "failed with [redacted]"


def test_only_the_orgs_own_secrets_are_read(org, org_secrets):
    other = make_org()
    assert org_secrets["llm"] in redact_outside(f"key {org_secrets['llm']}", org_id=other.id)


def test_a_secret_that_cannot_be_decrypted_does_not_hide_the_others(org, org_secrets):
    LlmConnection.objects.filter(org=org).update(api_key="not-a-fernet-token")
    clean = redact_outside(f"{org_secrets['env']} and {org_secrets['webhook']}", org_id=org.id)
    assert clean == "[redacted] and [redacted]"


def test_a_step_without_an_error_reads_nothing(org, org_secrets, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert redact_outside("", org_id=org.id) == ""
        OrgSecrets(org.id)  # the values are read when a text needs them


def _shaped() -> dict[str, tuple[str, str]]:
    """kind -> (how it appears in a text, the part that is the secret)."""
    basic = base64.b64encode(b"user:" + secrets.token_hex(6).encode()).decode()
    bearer, key, password = secrets.token_hex(12), secrets.token_hex(5) + "zz", secrets.token_hex(4) + "q"
    pem = "MIIEowIBAAKCAQEA\nq83kd"
    found = {kind: (value, value) for kind, value in {
        "gateway key": "agw_" + secrets.token_urlsafe(32),
        "API token": "al_" + secrets.token_urlsafe(32),
        "webhook secret": "whsec_" + secrets.token_urlsafe(32),
        "OpenAI key": "sk-proj-" + secrets.token_urlsafe(30),
        "Stripe key": "sk_live_" + secrets.token_hex(16),
        "GitHub PAT": "github_pat_11ABCDEFG0" + secrets.token_hex(20),
        "GitHub token": "ghp_" + secrets.token_hex(18),
        "Google key": "AIza" + secrets.token_urlsafe(26)[:35],
        "Slack token": "xoxb-1234567890-" + secrets.token_hex(8),
        "AWS key id": "AKIA" + secrets.token_hex(8).upper(),
        "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    }.items()}
    found.update({
        "bearer header": (f"Authorization: Bearer {bearer}", bearer),
        "basic header": (f"Authorization: Basic {basic}", basic),
        "PEM block": (f"-----BEGIN RSA PRIVATE KEY-----\n{pem}\n-----END RSA PRIVATE KEY-----", pem),
        "cut PEM block": (f"-----BEGIN PRIVATE KEY-----\n{pem}", pem),
        "assigned key": (f"api_key={key}", key),
        "assigned password": (f'"password": "{password}"', password),
    })
    return found


SHAPED = _shaped()


@pytest.mark.parametrize("kind", sorted(SHAPED))
def test_credential_shapes_are_masked_without_knowing_the_value(kind):
    text, secret = SHAPED[kind]
    clean = redact_text(f"The server said: {text} (401).")
    assert secret not in clean, clean
    assert clean.startswith("The server said: ") and "[redacted]" in clean


@pytest.mark.parametrize("kind", ["gateway key", "webhook secret", "Stripe key", "GitHub PAT", "Google key", "JWT",
                                  "PEM block"])
def test_events_and_audit_rows_mask_the_new_shapes_too(kind):
    text, secret = SHAPED[kind]
    assert secret not in json.dumps(redact({"note": f"saw {text}"}))


@pytest.mark.parametrize("text", [
    "Basic authentication failed for this server.",
    "Token budget reached: 5000 tokens.",
    "The bearer of this message is trusted.",
    "password: [redacted]",
    "skip-the-rest and sk-short",
    "Could not connect to http://127.0.0.1:8123/mcp: connection refused.",
])
def test_ordinary_error_words_stay(text):
    assert redact_text(text) == text


def test_log_lines_and_their_tracebacks_lose_credential_shapes():
    key = "sk-live-" + secrets.token_hex(16)
    record = logging.LogRecord("apps.runs", logging.ERROR, __file__, 1, "provider said %s", (f"Bearer {key}",), None)
    try:
        raise RuntimeError(f"Incorrect API key provided: {key}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    line = RedactingFormatter("%(levelname)s %(message)s").format(record)
    assert key not in line and "Incorrect API key provided: [redacted]" in line and "RuntimeError" in line
