"""Local fakes of the OpenAI and Anthropic HTTP APIs (127.0.0.1, a thread each): the process edge.

Each records the requests it got and answers with what the test queued, or with what a queued function of
the request returns (the Anthropic one streams Server-Sent Events when asked to, as pydantic-ai's adapter
does for models whose default output limit is large). A reply's `after_s` is how long the model takes to answer.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLLM:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.requests: list[dict[str, Any]] = []
        self.replies: list[tuple[int, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append({"path": self.path, "headers": headers, "body": body})
                status, reply = fake.replies.pop(0) if fake.replies else (200, {"text": "OK"})
                if callable(reply):  # a reply that depends on what the model was sent
                    reply = reply(body)
                time.sleep(reply.get("after_s", 0) if isinstance(reply, dict) else 0)  # a slow model
                if status != 200:
                    self._send(status, "application/json", json.dumps(reply).encode())
                elif fake.kind == "openai":
                    self._send(200, "application/json", json.dumps(openai_completion(body, reply)).encode())
                elif body.get("stream"):
                    self._send(200, "text/event-stream", anthropic_stream(body, reply).encode())
                else:
                    self._send(200, "application/json", json.dumps(anthropic_message(body, reply)).encode())

            def _send(self, status: int, content_type: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}" + ("/v1" if self.kind == "openai" else "")

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def openai_completion(request: dict, reply: dict) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("text")}
    if "tool_call" in reply:
        name, args = reply["tool_call"]
        message["content"] = None
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": request["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if "tool_call" in reply else "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}}


def anthropic_message(request: dict, reply: dict) -> dict:
    if "tool_call" in reply:
        name, args = reply["tool_call"]
        content, stop = [{"type": "tool_use", "id": "toolu_1", "name": name, "input": args}], "tool_use"
    else:
        content, stop = [{"type": "text", "text": reply["text"]}], "end_turn"
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": content, "model": request["model"],
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 2}}


def anthropic_stream(request: dict, reply: dict) -> str:
    def event(kind: str, data: dict) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": request["model"],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}
    out = [event("message_start", {"message": message})]
    if "tool_call" in reply:
        name, args = reply["tool_call"]
        out.append(event("content_block_start", {"index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": name, "input": {}}}))
        out.append(event("content_block_delta", {"index": 0, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps(args)}}))
        stop = "tool_use"
    else:
        out.append(event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}))
        out.append(event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": reply["text"]}}))
        stop = "end_turn"
    out.append(event("content_block_stop", {"index": 0}))
    out.append(event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": 2}}))
    out.append(event("message_stop", {}))
    return "".join(out)
