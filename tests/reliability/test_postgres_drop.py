"""The database drops the workers' connections (pg_terminate_backend) while a run is mid-step.

Found by this test: the engine's catch-all reconnected and failed the run ("Internal error:
OperationalError: terminating connection due to administrator command"); a lost database
connection now leaves the run to beat's sweeper, which resumes it from its last committed step."""

from __future__ import annotations

import time

import pytest
import requests
from django.db import connection

from tests.reliability.conftest import lease_runs_out, settle, wait_in_flight

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.stack]


def terminate_other_connections() -> int:
    """Every other backend on this test database: the workers' (nobody else uses it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return sum(1 for (ok,) in cursor.fetchall() if ok)


def test_a_run_whose_database_connection_drops_mid_step_recovers_without_repeating_a_call(cluster, slow_desk):
    cluster.worker(concurrency=2)
    cluster.beat()
    crew = slow_desk.crew("Through a dropped connection", slow_calls=3)
    run = slow_desk.start(crew, "pg")
    wait_in_flight(slow_desk, run.id, "pg", n=2)  # the step's transaction is open around the call's outcome
    assert terminate_other_connections() >= 1
    time.sleep(2)  # the call answers; storing its outcome fails on the dead connection, the task errors out
    lease_runs_out(run.id)
    run = settle(run.id, slow_desk, "pg", timeout=90)
    assert run.status == "succeeded", run.error
    assert slow_desk.executed("pg") == {"pg-1": 1, "pg-2": 1, "pg-3": 1}


def test_the_web_process_replaces_pooled_connections_that_postgres_closed(live_url):
    # The web process takes connections from a pool (config/settings.py, AIRLOCK_DB_POOL). A pooled
    # connection Postgres has closed (a restart, a failover, this terminate) must not reach a request:
    # without the pool's check, the next requests answered 500 (found by the full suite in CI order).
    def ask() -> int:  # a bearer token is looked up in the database: 401 for an unknown one
        return requests.get(f"{live_url}/api/v1/me", headers={"Authorization": "Bearer not-a-token"},
                            timeout=30).status_code

    assert [ask() for _ in range(3)] == [401, 401, 401]
    assert terminate_other_connections() >= 1
    assert [ask() for _ in range(3)] == [401, 401, 401]
