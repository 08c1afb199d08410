"""A fake OpenAI-compatible chat model for the token benchmark (bench/tokens.py): it records every request body
it receives and plays the same part for every framework, so what differs between two sides is only what each
framework sends.

    python bench/fake_openai.py --port 0      # prints the port it listens on, then serves until stopped

Standard library only: it runs with whichever interpreter starts it. `POST <any prefix>/chat/completions`
answers; `GET /_recorded` returns every body received so far (with the path it came to), `POST /_reset`
forgets them.

What it says, for a task whose text carries `Look up record #K`:
- while no result of the lookup tool for K is in the conversation: call the tool with {"n": K} (a native tool
  call when the request offers tools, else a ReAct `Action:` block, the format a framework without native tool
  calling asks for);
- once the result is there: the agent's conclusion (`conclusion(K)`, the same text on every side), with the
  STATUS/REASON lines Airlock asks for (a framework that does not ask for them passes them on as text).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # payload.py, when run as a script from any venv

from payload import lookup_result

TASK_MARK = re.compile(r"Look up record #(\d+)")
CONCLUSION_EXCERPT = 300  # characters of the record the conclusion quotes


def conclusion(k: int) -> str:
    """What agent K concludes, the same on every side: a short report quoting the record, and its status."""
    return (f"Record {k} is on file and matches the previous step's result. Its opening reads: "
            f"{lookup_result(k)[:CONCLUSION_EXCERPT]}\n"
            f"STATUS: done\nREASON: record {k} was looked up and checked.")


def _texts(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def reply(body: dict) -> dict:
    """The chat completion this model answers `body` with."""
    messages = body.get("messages") or []
    k = next((int(m.group(1)) for msg in messages if msg.get("role") in ("system", "user")
              for m in [TASK_MARK.search(_texts(msg))] if m), 0)
    opening = lookup_result(k)[:64]
    has_result = any(opening in _texts(msg) for msg in messages if msg.get("role") in ("tool", "user", "assistant"))
    tools = body.get("tools") or []
    message: dict = {"role": "assistant", "content": None}
    finish = "stop"
    if has_result:
        text = conclusion(k)
        message["content"] = text if tools else f"Thought: I now can give a great answer\nFinal Answer: {text}"
    elif tools:
        name = tools[0]["function"]["name"]
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps({"n": k})}}]
        finish = "tool_calls"
    else:
        message["content"] = (f"Thought: I need record {k}.\nAction: lookup\nAction Input: {json.dumps({'n': k})}")
    chars = len(json.dumps(messages)) + len(json.dumps(tools))
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "fake", "system_fingerprint": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": chars // 4, "completion_tokens": 40, "total_tokens": chars // 4 + 40}}


class Recorder(BaseHTTPRequestHandler):
    recorded: list[dict] = []
    lock = threading.Lock()

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def _send(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/_recorded"):
            with self.lock:
                self._send(200, list(self.recorded))
            return
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "bench"}]})
            return
        self._send(404, {"error": {"message": f"no {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.startswith("/_reset"):
            with self.lock:
                self.recorded.clear()
            self._send(200, {"ok": True})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no {self.path}"}})
            return
        body = json.loads(raw or b"{}")
        with self.lock:
            self.recorded.append({"path": self.path, "body": body})
        if body.get("stream"):
            self._send(400, {"error": {"message": "this fake model does not stream"}})
            return
        self._send(200, reply(body))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Recorder)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
