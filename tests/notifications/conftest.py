"""A real SMTP server on loopback (aiosmtpd) that keeps every message it receives, and the order desk."""

from __future__ import annotations

import email
import email.policy
import re
import time

import pytest
from aiosmtpd.controller import Controller
from django.test import override_settings

from tests.processes import free_port
from tests.runs.conftest import Desk, actor, desk  # noqa: F401

LINK = re.compile(r"https?://\S+/approvals/email/[\w-]+/(?:\?do=\w+)?")


class Mailbox:
    """What the SMTP server received: parsed messages, in order."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # aiosmtpd's handler hook
        self.messages.append(email.message_from_bytes(envelope.original_content, policy=email.policy.default))
        return "250 OK"

    def to(self, address: str) -> email.message.EmailMessage:
        found = [m for m in self.messages if address in m["To"]]
        assert len(found) == 1, [m["To"] for m in self.messages]
        return found[0]

    def wait(self, count: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.messages) >= count, len(self.messages)


def links(message: email.message.EmailMessage) -> dict[str, str]:
    """The approve / reject / open links of the plain-text part."""
    text = message.get_body(preferencelist=("plain",)).get_content()
    found = LINK.findall(text)
    return {"approve": next(u for u in found if u.endswith("do=approve")),
            "reject": next(u for u in found if u.endswith("do=reject")),
            "open": next(u for u in found if "?" not in u)}


@pytest.fixture
def smtp():
    """Mailbox of a real SMTP server; Django sends to it over SMTP while the test runs."""
    mailbox, port = Mailbox(), free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    with override_settings(EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1",
                           EMAIL_PORT=port, EMAIL_USE_TLS=False, EMAIL_USE_SSL=False, EMAIL_HOST_USER="",
                           EMAIL_HOST_PASSWORD=""):
        yield mailbox
    controller.stop()
