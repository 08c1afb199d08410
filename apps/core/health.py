"""Liveness and readiness: what a load balancer or an orchestrator asks before sending traffic.

`/healthz` says the process answers and reaches its database (restart me if not). `/readyz` says
everything a request may need is there: the database, migrations applied, Redis and the task broker
(embedded mode: their folders). A failing check names itself, so the operator reads what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection

Check = Callable[[], str]  # returns "" when fine, else what is wrong (one line)

_migrations_applied = False  # once true it stays true for this process: the plan only grows with a deploy


def database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"database unreachable: {type(exc).__name__}"
    return ""


def migrations() -> str:
    global _migrations_applied
    if _migrations_applied:
        return ""
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        return f"migrations unreadable: {type(exc).__name__}"
    if plan:
        return f"{len(plan)} migration(s) not applied (run `manage.py migrate`), first {plan[0][0]}"
    _migrations_applied = True
    return ""


def redis() -> str:
    if not settings.REDIS_URL:
        return ""
    import redis as redis_client

    try:
        client = redis_client.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        client.ping()
        client.close()
    except Exception as exc:
        return f"redis unreachable: {type(exc).__name__}"
    return ""


def broker() -> str:
    """The Celery broker: Redis is checked above; the embedded broker is three folders."""
    if settings.REDIS_URL:
        return ""
    missing = [name for name in ("queue", "processed", "control") if not (Path(settings.BROKER_DIR) / name).is_dir()]
    return f"embedded broker folders missing: {', '.join(missing)}" if missing else ""


READINESS: dict[str, Check] = {"database": database, "migrations": migrations, "redis": redis, "broker": broker}


def readiness() -> dict[str, str]:
    """Each check's problem ("" when fine). The database goes first: migrations need it."""
    problems = {"database": database()}
    for name, check in READINESS.items():
        if name == "database":
            continue
        problems[name] = "skipped: database unreachable" if problems["database"] and name == "migrations" else check()
    return problems
