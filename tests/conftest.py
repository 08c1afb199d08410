from __future__ import annotations

import time
import warnings

import pytest
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError, connection

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
    TRUNCATE (CI, 1 December: once in 1,015 tests). Only the test teardown truncates, so only it retries.

    It also reconnects, with a warning naming the test, when the server ended this process's connection
    after the test's last query (CI, 7 December: "terminating connection due to administrator command" at
    the teardown of a test that passed; nothing in it ends that connection). The teardown's job is to empty
    the database, and a connection the server dropped says nothing about the test."""
    from django.test import TransactionTestCase

    flush = TransactionTestCase._fixture_teardown

    def teardown(self, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            try:
                return flush(self)
            except (CommandError, OperationalError) as exc:
                cause = exc.__cause__ if isinstance(exc, CommandError) else exc
                if attempt == attempts or not isinstance(cause, OperationalError):
                    raise
                if "deadlock detected" in str(cause):
                    time.sleep(0.2)
                elif not connection.is_usable():
                    warnings.warn(f"the server ended the test database connection before the teardown "
                                  f"({str(cause).strip()}); reconnected", stacklevel=1)
                    connection.close()
                else:
                    raise

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


@pytest.fixture(scope="session", autouse=True)
def no_session_left_on_the_test_database(django_db_setup, django_db_blocker):
    """At the session's end, before pytest-django drops the test database: a process a test stopped last may
    still be exiting, its session still open, and DROP DATABASE refuses a database in use (a warning, and the
    database left on the server; 7 December, a worker group SIGKILLed by the session's last test). So wait a
    little for them, then end what is left: only this session's processes use its test database."""
    yield
    db = connection.settings_dict
    if connection.vendor != "postgresql" or db["NAME"] != db.get("TEST", {}).get("NAME"):
        return  # no test of this session needed the database, so pytest-django made none
    others = "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    with django_db_blocker.unblock():
        if connection.connection is not None and not connection.is_usable():
            connection.close()  # the server ended it (see flush_retries_a_deadlock): a new one looks
        _wait_then_end(others)


def _wait_then_end(others: str) -> None:
    with connection.cursor() as cursor:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            cursor.execute(f"SELECT count(*) {others}")
            if not cursor.fetchone()[0]:
                return
            time.sleep(0.2)
        cursor.execute(f"SELECT count(pg_terminate_backend(pid)) {others}")


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
    """A real Celery worker on the test database and broker. Use with transactional_db.

    It lives for the session once a test has asked for it, but it takes tasks only during the tests that ask
    for it (`session_worker_only_where_asked`)."""
    from tests.processes import celery_worker

    with celery_worker(process_logs) as proc:
        SESSION_WORKER.append(SessionWorker(proc.node))
        try:
            yield proc
        finally:
            SESSION_WORKER.clear()


class SessionWorker:
    """The session's worker's queues, switched on for the tests that ask for the worker and off for the rest.

    Off, so a test that commits its rows and drives a run inline, or starts a worker of its own, is not raced by
    the session's worker taking the task its commit published (CI, 6 December: an approved call claimed by it
    while the test played the worker that died after `dispatched`). On again, the messages earlier tests left
    are dropped first: their rows were truncated with those tests, and they are not this test's."""

    def __init__(self, node: str):
        self.node, self.listening = node, True

    def listen(self, on: bool) -> None:
        from config.celery import WORKER_QUEUES, app

        if on == self.listening:
            return
        queues = WORKER_QUEUES.split(",")
        if on:
            with app.connection_for_write() as conn:
                for queue in queues:
                    conn.default_channel.queue_purge(queue)
        for queue in queues:
            switch = app.control.add_consumer if on else app.control.cancel_consumer
            replies = switch(queue, destination=[self.node], reply=True, timeout=10)
            if not replies:
                raise RuntimeError(f"the session's worker {self.node} did not answer to switch {queue} {on}")
        self.listening = on


SESSION_WORKER: list[SessionWorker] = []


@pytest.fixture(autouse=True)
def session_worker_only_where_asked(request):
    if "worker" in request.fixturenames:
        request.getfixturevalue("worker")
    for session_worker in SESSION_WORKER:
        session_worker.listen("worker" in request.fixturenames)
