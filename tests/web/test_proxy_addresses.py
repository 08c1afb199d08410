"""Behind a reverse proxy, the audit log records the person's address: uvicorn believes
X-Forwarded-For only from the proxy addresses in FORWARDED_ALLOW_IPS (the compose file sets it), so a
client that is not the proxy cannot put a made-up address in the log."""

from __future__ import annotations

import re

import pytest
import requests

from apps.audit.models import AuditEvent
from tests.processes import web_server

pytestmark = pytest.mark.django_db(transaction=True)


def failed_sign_in(url: str, email: str, forwarded_for: str) -> None:
    session = requests.Session()
    page = session.get(f"{url}/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    session.post(f"{url}/login/", data={"csrfmiddlewaretoken": token, "username": email, "password": "wrong"},
                 headers={"X-Forwarded-For": forwarded_for, "Referer": f"{url}/login/"}, timeout=30)


def recorded_ip(email: str) -> str | None:
    event = AuditEvent.objects.filter(action="auth.sign_in_failed", data__email=email).order_by("-created_at").first()
    assert event is not None, "no audit row for the failed sign-in"
    return event.ip


def test_the_audit_log_has_the_clients_address_from_a_trusted_proxy(owner, tmp_path):
    with web_server(tmp_path, FORWARDED_ALLOW_IPS="127.0.0.1") as url:
        failed_sign_in(url, owner.user.email, "198.51.100.7")
    assert recorded_ip(owner.user.email) == "198.51.100.7"


def test_a_forwarded_address_from_anyone_else_is_ignored(owner, tmp_path):
    with web_server(tmp_path, FORWARDED_ALLOW_IPS="10.20.30.40") as url:  # the proxy is elsewhere
        failed_sign_in(url, owner.user.email, "198.51.100.7")
    assert recorded_ip(owner.user.email) == "127.0.0.1"
