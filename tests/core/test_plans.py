"""Prepared statements and their plans (config/settings.py, apps/core/db.py).

Web and API connections plan every execution for its own parameters: a generic plan cannot use a partial
index whose predicate is a parameter (the run list's "has findings" filter, 12 -> 213 ms at 100k runs).
Worker connections may keep a generic plan for the engine's by-id statements. Postgres counts both kinds
per prepared statement of a session (pg_prepared_statements), which is what these tests read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connections
from django.db.backends.signals import connection_created

from apps.core.db import RECEIVER_UID, allow_generic_plans

pytestmark = [pytest.mark.django_db, pytest.mark.stack]  # Postgres's own plan cache

ROOT = Path(__file__).resolve().parents[2]
READ = "SELECT id FROM runs_run WHERE id = %s"


def _plans_after_repeats(connection, times: int = 12) -> tuple[int, int]:
    """(generic, custom) plans Postgres made for READ, run `times` times on `connection`."""
    with connection.cursor() as cursor:
        for _ in range(times):
            cursor.execute(READ, [uuid.uuid4()])
        cursor.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                       "WHERE statement LIKE 'SELECT id FROM runs_run WHERE id = $1%%'")
        return cursor.fetchone()


def test_a_web_connection_prepares_repeated_statements_but_never_uses_a_generic_plan():
    connection = connections.create_connection("default")
    try:
        generic, custom = _plans_after_repeats(connection)
        assert generic == 0
        assert custom >= 7  # prepared from the 5th execution on, each one planned for its parameters
    finally:
        connection.close()


def test_a_worker_connection_reuses_a_generic_plan():
    try:
        allow_generic_plans()
        connection = connections.create_connection("default")
        try:
            generic, _ = _plans_after_repeats(connection)
            assert generic > 0
        finally:
            connection.close()
    finally:
        connection_created.disconnect(dispatch_uid=RECEIVER_UID)


def test_prepared_statements_can_be_turned_off_for_a_pooler():
    """AIRLOCK_DB_PREPARED=0 (PgBouncer in transaction mode): Django's defaults, nothing prepared."""
    code = ("import django, json; django.setup(); from django.conf import settings; "
            "print(json.dumps(settings.DATABASES['default']['OPTIONS']))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1"}
    on = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", code], env={**env, "AIRLOCK_DB_PREPARED": "0"}, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert json.loads(on.stdout) == {"server_side_binding": True, "prepare_threshold": 5,
                                     "options": "-c plan_cache_mode=force_custom_plan"}
    assert json.loads(off.stdout) == {}
