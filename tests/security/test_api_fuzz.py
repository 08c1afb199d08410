"""schemathesis against /api/v1/openapi.json, in-process through Django's WSGI app.

With an admin token: generated requests (valid and invalid) never cause a 5xx, and every
answer matches the schema where the schema documents it. Without a token, or with a wrong one:
every route answers 401 with a JSON detail, before looking at the request.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.factories import make_org, token_for
from tests.security import routes

pytestmark = pytest.mark.django_db

SCHEMA = schemathesis.openapi.from_dict(routes.openapi_schema())
SCHEMA.app = get_wsgi_application()
FUZZ = settings(max_examples=8, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))
QUICK = settings(FUZZ, max_examples=3)


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """What Django's test client does: the WSGI app must not close the test transaction's connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(db):
    return token_for(make_org("Fuzzed"), "admin")


def call_and_validate(case, checks, headers=None):
    """One request as its own unit of work: a savepoint rolled back afterwards, which also
    recovers the test's transaction after a query the database refused (as autocommit would)."""
    savepoint = transaction.savepoint()
    try:
        response = case.call(headers=headers)
    finally:
        transaction.savepoint_rollback(savepoint)
    case.validate_response(response, checks=checks)


@SCHEMA.parametrize()
@FUZZ
def test_no_server_errors_and_answers_match_the_schema(case, admin_token):
    call_and_validate(case, [not_a_server_error, response_schema_conformance, content_type_conformance],
                      headers={"Authorization": f"Bearer {admin_token}"})


def _refused(ctx, response, case) -> bool:
    if case.method.upper() != case.operation.method.upper():  # schemathesis also tries unsupported methods
        assert response.status_code == 405, f"{case.method} {case.path}: {response.status_code}"
        return True
    assert response.status_code == 401, f"{case.method} {case.path}: {response.status_code} without a valid token"
    assert "Authentication required" in response.json()["detail"]
    return True


@SCHEMA.parametrize()
@QUICK
def test_every_route_refuses_a_caller_without_a_token(case):
    call_and_validate(case, [_refused])


@SCHEMA.parametrize()
@QUICK
def test_every_route_refuses_a_wrong_token(case):
    call_and_validate(case, [_refused], headers={"Authorization": "Bearer al_not-a-real-token"})


def test_the_schema_has_every_router():
    """If the schema lost its routes, the generated tests above would prove nothing."""
    tags = {tag for op in routes.operations() for tag in op.operation.get("tags", [])}
    assert {"servers", "tools", "agents", "crews", "members", "tokens"} <= tags
    assert len(list(SCHEMA.get_all_operations())) >= 30
