"""Test sessions side by side: each pytest-xdist worker (scripts/test) is a session of its own, and never shares a
database, a Redis prefix, a channel prefix or a var/ folder with another one or with its controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.processes import ROOT

SHOWN = """
import json, os
from django.conf import settings
print(json.dumps({"run_id": settings.RUN_ID, "database": settings.DATABASES["default"].get("TEST", {}).get("NAME"),
                  "var_dir": str(settings.VAR_DIR), "channel_prefix": os.environ["AIRLOCK_CHANNEL_PREFIX"],
                  "inherited": os.environ["AIRLOCK_TEST_RUN_ID"]}))
"""


def session_settings(**env: str) -> dict:
    """The test settings as a process started with `env` (and no session of this one's) sees them."""
    base = {k: v for k, v in os.environ.items()
            if k not in {"AIRLOCK_TEST_RUN_ID", "AIRLOCK_VAR_DIR", "AIRLOCK_CHANNEL_PREFIX", "PYTEST_XDIST_WORKER"}}
    base.pop("DATABASE_URL", None)  # the embedded mode: TEST's name is then the var folder's file
    out = subprocess.run([sys.executable, "-c", f"import django; django.setup()\n{SHOWN}"], cwd=ROOT, check=True,
                         env={**base, "DJANGO_SETTINGS_MODULE": "config.settings_test", **env},
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_each_worker_takes_a_run_id_of_its_own_and_what_it_names():
    controller = session_settings(AIRLOCK_TEST_RUN_ID="t42")
    assert controller["run_id"] == "t42" and controller["var_dir"].endswith("/var/test/t42")
    inherited = {"AIRLOCK_TEST_RUN_ID": "t42", "AIRLOCK_VAR_DIR": controller["var_dir"],
                 "AIRLOCK_CHANNEL_PREFIX": controller["channel_prefix"]}  # what the controller leaves in os.environ
    workers = [session_settings(**inherited, PYTEST_XDIST_WORKER=name) for name in ("gw0", "gw1")]
    assert [w["run_id"] for w in workers] == ["t42_gw0", "t42_gw1"]
    for field in ("database", "var_dir", "channel_prefix"):
        values = [controller[field], *(w[field] for w in workers)]
        assert len(set(values)) == 3, (field, values)  # nothing shared between the three sessions
    assert workers[1]["var_dir"].endswith("/var/test/t42_gw1")
    assert workers[1]["channel_prefix"] == "airlock-t42_gw1"


def test_a_process_a_worker_starts_stays_in_that_workers_session():
    worker = session_settings(AIRLOCK_TEST_RUN_ID="t42", PYTEST_XDIST_WORKER="gw1")
    child = session_settings(AIRLOCK_TEST_RUN_ID=worker["inherited"], AIRLOCK_VAR_DIR=worker["var_dir"],
                             AIRLOCK_CHANNEL_PREFIX=worker["channel_prefix"], PYTEST_XDIST_WORKER="gw1")
    assert child == worker


def test_a_folder_set_for_the_whole_run_is_kept_by_every_worker(tmp_path):
    chosen = str(tmp_path / "mine")
    worker = session_settings(AIRLOCK_TEST_RUN_ID="t42", AIRLOCK_VAR_DIR=chosen, PYTEST_XDIST_WORKER="gw0")
    assert worker["var_dir"] == chosen and worker["run_id"] == "t42_gw0"
