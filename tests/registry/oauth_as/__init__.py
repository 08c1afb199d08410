"""A real OAuth authorization server and an OAuth-protected MCP server of our own, on loopback (see server.py
and tests/registry/servers/oauth_http.py), plus the admin's part of the consent, done over HTTP."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2

from tests.processes import ROOT, free_port, stop, wait_for_port, wait_for_text
from tests.registry.oauth_as.server import AS_PASSWORD


@dataclass(frozen=True)
class Protected:
    as_url: str  # the issuer
    mcp_url: str  # the MCP server's endpoint (the resource)


@contextmanager
def protected_server(log_dir: Path, *, token_seconds: int = 3600, redirect_uris: tuple[str, ...] = ()):
    as_port, rs_port = free_port(), free_port()
    as_log, rs_log = log_dir / f"as-{as_port}.log", log_dir / f"rs-{rs_port}.log"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(AS_TOKEN_SECONDS=str(token_seconds), AS_REDIRECT_URIS=" ".join(redirect_uris), PYTHONUNBUFFERED="1")
    as_url = f"http://127.0.0.1:{as_port}"
    with as_log.open("w") as out:
        auth_server = subprocess.Popen([sys.executable, "-m", "tests.registry.oauth_as.server", str(as_port),
                                        str(log_dir / f"as-{as_port}.sqlite3")], cwd=ROOT, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    with rs_log.open("w") as out:
        resource_server = subprocess.Popen([sys.executable, "-m", "tests.registry.servers.oauth_http", str(rs_port),
                                            as_url], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)
    try:
        wait_for_text(as_log, "test AS listening", auth_server, timeout=60)
        wait_for_port(rs_port, resource_server, rs_log, timeout=60)
        yield Protected(as_url=as_url, mcp_url=f"http://127.0.0.1:{rs_port}/mcp")
    finally:
        stop(resource_server)
        stop(auth_server)


def _form_fields(html: str) -> dict[str, str]:
    fields = {}
    for tag in re.findall(r"<input[^>]*>", html):
        name, value = re.search(r'name="([^"]+)"', tag), re.search(r'value="([^"]*)"', tag)
        if name:
            fields[unescape(name.group(1))] = unescape(value.group(1)) if value else ""
    return fields


def consent(authorization_url: str) -> str:
    """Signs in to the authorization server as ada, approves, and returns where it redirects the browser
    (Airlock's callback URL with `code` and `state`)."""
    with httpx2.Client(trust_env=False, follow_redirects=False) as http:
        page = http.get(authorization_url)
        assert page.status_code == 302 and "/login/" in page.headers["location"], page.text[:300]
        login_url = urljoin(authorization_url, page.headers["location"])
        form = _form_fields(http.get(login_url).text)
        form.update(username="ada", password=AS_PASSWORD)
        signed_in = http.post(login_url, data=form)
        assert signed_in.status_code == 302, signed_in.text[:500]
        page = http.get(authorization_url)
        assert page.status_code == 200, page.text[:300]
        form = _form_fields(page.text)
        form["allow"] = "Authorize"
        answer = http.post(authorization_url.split("?")[0], data=form)
        assert answer.status_code == 302, answer.text[:500]
        return answer.headers["location"]


def callback_query(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
