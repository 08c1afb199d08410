from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError

from tests.factories import add_member, make_org, owner_of


def pytest_collection_modifyitems(config, items):
    """Tests marked `stack` test Postgres or Redis themselves (Postgres dropping connections, Redis
    MONITOR, a scan of Postgres's catalog): the embedded mode has neither, so there they say so and
    do not run. scripts/test uses the machine's Postgres and Redis when they answer; CI sets both."""
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql") and settings.REDIS_URL:
        return
    reason = pytest.mark.skip(reason="needs Postgres and Redis (DATABASE_URL, REDIS_URL): embedded mode has neither")
    for item in items:
        if item.get_closest_marker("stack"):
            item.add_marker(reason)


@pytest.fixture(scope="session", autouse=True)
def flush_retries_a_deadlock():
    """A transactional test's database is emptied after it with one TRUNCATE of every table, which takes
    each table's exclusive lock in turn. The live gateway and worker processes of other tests keep
    reading meanwhile (a gateway's maintenance join of its sessions and their runs, every 0.3 s), and a
    reader holding one of those tables while waiting for the next deadlocks with it; Postgres aborts the
    TRUNCATE (CI, 1 December: once in 1,015 tests). Only the test teardown truncates, so only it retries."""
    from django.test import TransactionTestCase

    flush = TransactionTestCase._fixture_teardown

    def teardown(self, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            try:
                return flush(self)
            except CommandError as exc:
                if attempt == attempts or "deadlock detected" not in str(getattr(exc, "__cause__", "")) or \
                        not isinstance(exc.__cause__, OperationalError):
                    raise
                time.sleep(0.2)

    TransactionTestCase._fixture_teardown = teardown
    yield
    TransactionTestCase._fixture_teardown = flush


@pytest.fixture
def org(db):
    return make_org("Acme")


@pytest.fixture
def owner(org):
    return owner_of(org)


@pytest.fixture
def admin(org):
    return add_member(org, "admin")


@pytest.fixture
def builder(org):
    return add_member(org, "builder")


@pytest.fixture
def approver(org):
    return add_member(org, "approver")


@pytest.fixture
def viewer(org):
    return add_member(org, "viewer")


@pytest.fixture
def outsider(db):
    """The owner of another organisation, who must never see Acme's things."""
    return owner_of(make_org("Globex"))


def signed_in(client, membership):
    client.force_login(membership.user)
    return client


@pytest.fixture(scope="session")
def process_logs(tmp_path_factory):
    return tmp_path_factory.mktemp("process-logs")


@pytest.fixture(scope="session")
def live_url(django_db_setup, process_logs):
    """A real uvicorn server (HTTP + websockets) on the test database. Use with transactional_db."""
    from tests.processes import web_server

    with web_server(process_logs) as url:
        yield url


@pytest.fixture(scope="session")
def gateway(django_db_setup, process_logs):
    """The MCP gateway (`uvicorn config.gateway:app`) on the test database: (endpoint URL, process).
    Use with transactional_db."""
    from tests.processes import gateway_server

    with gateway_server(process_logs, AIRLOCK_GATEWAY_POLL_S="0.3") as (url, proc):
        yield url, proc


@pytest.fixture(scope="session")
def gateway_url(gateway):
    return gateway[0]


@pytest.fixture(scope="session")
def worker(django_db_setup, process_logs):
    """A real Celery worker on the test database and broker. Use with transactional_db."""
    from tests.processes import celery_worker

    with celery_worker(process_logs) as proc:
        yield proc
