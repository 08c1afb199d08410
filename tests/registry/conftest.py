"""Helpers for registry tests: real MCP server processes, registered through the services."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from apps.accounts.actors import member_actor
from apps.registry import services
from apps.registry.pool import pool
from tests.processes import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
SERVERS = Path(__file__).resolve().parent / "servers"
TEST_MCP = ROOT / "var" / "test-mcp"
TIME_SERVER = TEST_MCP / "venv" / "bin" / "mcp-server-time"
NODE_BIN = TEST_MCP / "node" / "node_modules" / ".bin"


@pytest.fixture
def actor(owner):
    return member_actor(owner)


@pytest.fixture(autouse=True)
def _close_pool_sessions():
    yield
    pool.close_all()


def register(actor, **fields):
    fields.setdefault("trust_tier", "internal")
    fields.setdefault("transport", "stdio")
    return services.create_server(actor=actor, sync=False, **fields)


def register_python(actor, name: str, script: str, *args: str, env=None, **fields):
    """A stdio server run by the project's Python: `script` is a module path or a file under servers/."""
    argv = ["-m", script] if not script.endswith(".py") else [str(SERVERS / script)]
    return register(actor, name=name, command=sys.executable, args=[*argv, *args], env=env or {}, cwd=str(ROOT),
                    **fields)


def order_desk_stdio(actor, data_file: Path, name: str = "orders"):
    return register_python(actor, name, "apps.demo.order_desk", "stdio", env={"ORDER_DESK_DATA": str(data_file)})


def write_tools(path: Path, tools: list[dict]) -> Path:
    path.write_text(json.dumps(tools))
    return path


@pytest.fixture
def order_desk_data(tmp_path):
    return tmp_path / "orders.json"


@pytest.fixture
def order_desk_http(order_desk_data, tmp_path):
    """The bundled demo server over Streamable HTTP, as its own process."""
    port = free_port()
    log = tmp_path / "order-desk-http.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "apps.demo.order_desk", "http", "--port", str(port)],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={"PATH": "/usr/bin:/bin", "ORDER_DESK_DATA": str(order_desk_data)})
    try:
        wait_for_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        pool.close_all()
        proc.kill()
        proc.wait()
