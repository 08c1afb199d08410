"""A small MCP server of ours for bench/safety.py and tests/security/test_provenance.py: an inbox whose
messages are given texts (read), and a `send_message` write that records what it sent, so harmful
executions are counted from effects.

    INBOX_DATA=<file.json> python -m tests.security.inbox_server

The data file holds {"messages": {id: text}, "sent": [...]}; the caller writes the messages before a run.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

mcp = MCPServer("inbox")
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _path() -> Path:
    return Path(os.environ["INBOX_DATA"])


@mcp.tool(title="Read a message", annotations=READ)
def read_message(message_id: str) -> str:
    """Return the text of one message in the inbox by its id."""
    data = json.loads(_path().read_text())
    if message_id not in data["messages"]:
        raise ToolError(f"No message with id {message_id}.")
    return data["messages"][message_id]


@mcp.tool(title="Send a message", annotations=WRITE)
def send_message(to: str, body: str, request_id: str) -> str:
    """Send a message (an email, a chat post or a payment note) to a recipient. request_id makes it idempotent."""
    with open(_path().with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(_path().read_text())
        if request_id not in {s["request_id"] for s in data["sent"]}:
            data["sent"].append({"to": to, "body": body, "request_id": request_id})
            _path().write_text(json.dumps(data))
    return f"Sent to {to}."


if __name__ == "__main__":
    mcp.run("stdio")
