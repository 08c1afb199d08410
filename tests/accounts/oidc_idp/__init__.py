"""A real OpenID Connect provider on loopback for single sign-on tests (see server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.processes import ROOT, free_port, stop, wait_for_text

IDP_PASSWORD = "idp-password-for-tests"


@dataclass(frozen=True)
class TestIdP:
    url: str  # the issuer: discovery is at url + /.well-known/openid-configuration
    port: int


@contextmanager
def oidc_provider(log_dir: Path, redirect_uris: list[str]):
    port = free_port()
    log = log_dir / f"idp-{port}.log"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(IDP_REDIRECT_URIS=",".join(redirect_uris), PYTHONUNBUFFERED="1")
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.accounts.oidc_idp.server", str(port),
                                 str(log_dir / f"idp-{port}.sqlite3")], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_text(log, "test IdP listening", proc, timeout=60)
        yield TestIdP(url=f"http://127.0.0.1:{port}/o", port=port)
    finally:
        stop(proc)
