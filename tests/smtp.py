"""A real SMTP server on loopback (aiosmtpd) that keeps what it is sent, for tests of emailed links."""

from __future__ import annotations

import email
import email.policy
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller

from tests.processes import free_port


@dataclass
class Inbox:
    port: int
    messages: list[email.message.EmailMessage] = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

    def wait_for(self, count: int = 1, timeout: float = 10) -> list[email.message.EmailMessage]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.messages) >= count, f"{len(self.messages)} mails arrived, expected {count}"
        return self.messages

    def body(self, index: int = -1) -> str:
        return self.messages[index].get_body(preferencelist=("plain",)).get_content()


@contextmanager
def smtp_server():
    inbox = Inbox(port=free_port())
    controller = Controller(inbox, hostname="127.0.0.1", port=inbox.port)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()
