"""The OpenAPI document says what each operation can answer, errors included, with one schema."""

from __future__ import annotations

import pytest

WRITES = {"post", "put", "patch", "delete"}


@pytest.mark.django_db
def test_every_operation_documents_its_4xx_answers_with_the_error_schema(client):
    schema = client.get("/api/v1/openapi.json").json()
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["detail"] and "errors" in error["properties"]
    missing = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            expected = {"401", "403", "429"} if operation.get("security") else set()
            expected |= {"404"} if "{" in path else set()
            expected |= {"422"} if operation.get("parameters") or operation.get("requestBody") else set()
            expected |= {"400", "413"} if operation.get("requestBody") else set()
            expected |= {"409"} if method in WRITES else set()
            responses = operation["responses"]
            for status in expected:
                answer = responses.get(status)
                if answer is None or answer["content"]["application/json"]["schema"] != {
                        "$ref": "#/components/schemas/Error"}:
                    missing.append(f"{method.upper()} {path} {status}")
            if not operation.get("security") and path != "/api/v1/openapi.json":
                missing.append(f"{method.upper()} {path}: no security")
    assert missing == []
    assert schema["paths"]["/api/v1/me"]["get"]["responses"]["429"]["headers"]["Retry-After"]


@pytest.mark.django_db
def test_a_real_error_answer_has_the_documented_shape(client, org):
    from tests.factories import token_for

    answer = client.post("/api/v1/tokens", {"name": "x", "role": "owner"}, content_type="application/json",
                         headers={"Authorization": f"Bearer {token_for(org, 'admin')}"})
    assert answer.status_code == 422
    body = answer.json()
    assert isinstance(body["detail"], str) and all({"field", "message"} <= set(e) for e in body["errors"])
