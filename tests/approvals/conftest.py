"""Approvals tests reuse the runs tests' order desk (a real stdio MCP server with its own store)."""

from tests.runs.conftest import Desk, actor, desk  # noqa: F401
