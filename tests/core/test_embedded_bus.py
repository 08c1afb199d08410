"""The embedded mode's message bus (SQLite, one writer at a time): a live update published while another
process holds the write lock longer than SQLite's busy timeout waits its turn instead of being lost with a
traceback in the terminal (seen during `seed_demo` on a loaded machine). Runs in a process of its own on a
SQLite database of its own, whatever database the suite uses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.processes import ROOT

SCRIPT = textwrap.dedent("""
    import sqlite3, threading, time
    import django
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from apps.core.channel_layer import _insert
    from apps.core.models import BroadcastMessage
    other = sqlite3.connect(str(settings.DATABASES["default"]["NAME"]), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    threading.Timer(6.5, lambda: other.execute("COMMIT")).start()
    _insert("org.1", {"type": "run.changed"})
    print("published", BroadcastMessage.objects.filter(group="org.1").count())
""")


def test_a_live_update_waits_for_a_writer_that_outlasts_the_busy_timeout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="1", AIRLOCK_VAR_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "published 1" in done.stdout
