"""Answers every line with text that is not JSON-RPC."""

import sys

for _line in sys.stdin:
    print("hello, I am not an MCP server", flush=True)
