"""The embedded mode boots from a clean checkout with no services, the way README command 1
runs it: migrate, seed the demo, start web + worker + beat; a person signs in and a worker's
answer reaches their browser over a websocket; Ctrl-C stops everything."""

from __future__ import annotations

import asyncio
import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import websockets

from tests.processes import free_port, run_async, wait_for_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The committed tree (what a clean clone holds), without any var/ or .venv."""
    target = tmp_path_factory.mktemp("checkout")
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def embedded_env() -> dict[str, str]:
    keep = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}
    return {k: v for k, v in os.environ.items() if k in keep} | {"PYTHONUNBUFFERED": "1"}


def manage(checkout: Path, *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=checkout, env=embedded_env() | {"DEBUG": "1"},
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr  # what a newcomer's terminal shows
    return result.stdout


def sign_in(base: str, email: str, password: str) -> tuple[urllib.request.OpenerDirector, http.cookiejar.CookieJar]:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{base}/login/").read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode({"username": email, "password": password, "csrfmiddlewaretoken": csrf}).encode()
    opener.open(urllib.request.Request(f"{base}/login/", data=body, headers={"Referer": f"{base}/login/"}))
    return opener, jar


def test_embedded_mode_boots_from_a_clean_checkout(checkout):
    seeded = manage(checkout, "migrate", "--noinput") and manage(checkout, "seed_demo")
    password = re.search(r"owner@demo\.example\s+(\S+)", seeded).group(1)
    assert (checkout / "var" / "airlock.sqlite3").exists()

    port = free_port()
    log = checkout / "runall.log"
    with log.open("w") as out:
        launcher = subprocess.Popen([sys.executable, "manage.py", "runall", "--port", str(port)], cwd=checkout,
                                    env=embedded_env() | {"DEBUG": "1"}, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, launcher, log, timeout=60)
        base = f"http://127.0.0.1:{port}"
        opener, jar = sign_in(base, "owner@demo.example", password)
        dashboard = opener.open(f"{base}/").read().decode()
        assert "Demo Co" in dashboard
        org_id = re.search(r'ws-connect="/ws/org/([0-9a-f-]+)/"', dashboard).group(1)

        system = opener.open(f"{base}/settings/system/").read().decode()
        assert "embedded" in system
        csrf = next(c.value for c in jar if c.name == "csrftoken")
        cookies = "; ".join(f"{c.name}={c.value}" for c in jar)

        async def check_worker_over_websocket() -> str:
            headers = {"Cookie": cookies, "Origin": base}
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/org/{org_id}/", additional_headers=headers) as ws:
                assert "inbox-badge" in await asyncio.wait_for(ws.recv(), 10)
                request = urllib.request.Request(f"{base}/settings/system/check-worker/", data=b"", method="POST",
                                                 headers={"X-CSRFToken": csrf, "HX-Request": "true",
                                                          "Referer": f"{base}/settings/system/"})
                waiting = await asyncio.to_thread(lambda: opener.open(request).read().decode())
                check_id = re.search(r'id="worker-check-([0-9a-f-]+)"', waiting).group(1)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    frame = await asyncio.wait_for(ws.recv(), deadline - time.monotonic())
                    if f"worker-check-{check_id}" in frame:
                        return frame
            raise AssertionError("the worker's answer never arrived")

        assert 'data-state="answered"' in run_async(check_worker_over_websocket())
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=30)
    assert "Airlock stopped." in log.read_text()
    leftovers = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True).stdout.strip()
    assert leftovers == ""
