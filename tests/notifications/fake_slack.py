"""A local stand-in for Slack's Web API: a real HTTP server on loopback that answers the methods
Airlock calls (chat.postMessage, chat.update, chat.postEphemeral, users.info, users.lookupByEmail,
views.open), records
every call, and signs interaction payloads the way Slack does (v0 HMAC over "v0:<ts>:<body>")."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.users: dict[str, dict] = {}  # Slack user id -> users.info's "user"
        self.errors: dict[str, list[str]] = {}  # method -> the error codes its next calls answer, in turn
        self._ts = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str, args: dict) -> None:
                fake.calls.append((method, args))
                body = json.dumps(fake.answer(method, args)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                parts = urlsplit(self.path)
                self._answer(parts.path.rsplit("/", 1)[-1], {k: v[0] for k, v in parse_qs(parts.query).items()})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if "json" in (self.headers.get("Content-Type") or ""):
                    args = json.loads(raw or b"{}")
                else:
                    args = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                args["_auth"] = self.headers.get("Authorization", "")
                self._answer(urlsplit(self.path).path.rsplit("/", 1)[-1], args)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, method: str, args: dict) -> dict:
        if self.errors.get(method):
            return {"ok": False, "error": self.errors[method].pop(0)}
        if method == "chat.postMessage":
            self._ts += 1
            return {"ok": True, "channel": args["channel"], "ts": f"1700000000.{self._ts:06d}"}
        if method in ("chat.update", "chat.postEphemeral", "views.open"):
            return {"ok": True}
        if method == "users.info":
            user = self.users.get(args.get("user", ""))
            return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
        if method == "users.lookupByEmail":
            user = next((u for u in self.users.values() if u["profile"]["email"] == args.get("email")), None)
            return {"ok": True, "user": user} if user else {"ok": False, "error": "users_not_found"}
        return {"ok": False, "error": "unknown_method"}

    def called(self, method: str) -> list[dict]:
        return [args for name, args in self.calls if name == method]

    def add_user(self, slack_id: str, email: str, *, confirmed: bool = True) -> None:
        self.users[slack_id] = {"id": slack_id, "profile": {"email": email}, "is_email_confirmed": confirmed}

    def close(self) -> None:
        self.server.shutdown()


def signed(secret: str, payload: dict, *, at: float | None = None, signature: str = "") -> tuple[str, dict]:
    """Slack's form body for an interaction and its signing headers."""
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(at if at is not None else time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return body, {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": signature or f"v0={digest}"}


def click(action: str, approval_id, user: str, channel: str = "C-REFUNDS") -> dict:
    return {"type": "block_actions", "user": {"id": user}, "trigger_id": "trigger-1",
            "channel": {"id": channel}, "container": {"channel_id": channel},
            "actions": [{"action_id": f"airlock_{action}", "value": str(approval_id)}]}


def answer_form(approval_id, user: str, text: str) -> dict:
    return {"type": "view_submission", "user": {"id": user},
            "view": {"callback_id": "airlock_respond", "private_metadata": str(approval_id),
                     "state": {"values": {"answer": {"answer": {"type": "plain_text_input", "value": text}}}}}}
