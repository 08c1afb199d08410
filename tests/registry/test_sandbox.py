"""third_party stdio servers run in bubblewrap: no files outside their dirs, no inherited
environment, no network, and a memory limit that stops them."""

from __future__ import annotations

import socket

import pytest

from apps.registry import pool, sandbox
from tests.registry.conftest import register_python


@pytest.fixture
def probe(actor):
    return register_python(actor, "probe", "probe.py", trust_tier="third_party", env={"PROBE_OWN": "own-value"})


def _call(server, tool, **args):
    return pool.call_tool(server.id, tool, args, timeout=20)


def test_it_cannot_read_files_outside_its_dirs(probe, tmp_path, settings):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    for path in (str(secret), "/etc/passwd", str(settings.BASE_DIR / "config" / "settings.py")):
        assert _call(probe, "read_file", path=path).text.startswith("DENIED"), path
    written = _call(probe, "write_work", name="note.txt").text
    assert written == f"{sandbox.WORK}/note.txt"
    assert (sandbox.work_dir(str(probe.id)) / "note.txt").exists()


def test_it_sees_only_its_own_environment(probe, monkeypatch):
    monkeypatch.setenv("WORKER_ONLY_SECRET", "do-not-leak")
    text = _call(probe, "environment").text
    assert "PROBE_OWN=own-value" in text
    assert "do-not-leak" not in text and "DATABASE_URL" not in text and "SECRET_KEY" not in text
    _own, pid1 = text.split("--pid1--")
    assert pid1.strip() == ""


def test_it_cannot_reach_a_loopback_port(probe):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert _call(probe, "connect", port=port).text.startswith("REFUSED")


def test_it_is_stopped_past_its_memory_limit(probe):
    assert _call(probe, "hog", megabytes=32).text == "ALLOCATED:32"
    try:
        result = _call(probe, "hog", megabytes=1024)
    except pool.ToolCallFailed as exc:
        assert "closed the connection" in str(exc)  # killed by the cgroup's OOM killer
    else:
        assert result.is_error and "MemoryError" in result.text  # rlimit-only machines
    assert _call(probe, "hog", megabytes=8).text == "ALLOCATED:8"


def test_it_refuses_to_start_without_a_sandbox(actor, monkeypatch):
    monkeypatch.setattr(sandbox, "BWRAP", "/nonexistent/bwrap")
    sandbox._probe.cache_clear()
    server = register_python(actor, "probe2", "probe.py", trust_tier="third_party")
    try:
        with pytest.raises(pool.ToolCallFailed, match="Refusing to start a third-party server without a sandbox"):
            _call(server, "environment")
    finally:
        sandbox._probe.cache_clear()
