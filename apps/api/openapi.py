"""The 4xx answers of every operation, in the OpenAPI document, with the one error schema.

Errors are raised as domain errors and become JSON in one place (apps.api.errors), so the views
never declare them; this adds them to each operation from what the operation has: every
authenticated one can answer 401 (no working token), 403 (a role that does not allow it, or a
session without CSRF) and 429 (locked out after failed tokens); one with an id in its path 404;
one with parameters or a body 422; one with a body 400 (not JSON) and 413 (too large); a write
409 (a name taken, a decision already made, a state that changed).
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = "Error"
REF = {"$ref": f"#/components/schemas/{ERROR_SCHEMA}"}
ERROR = {
    "title": ERROR_SCHEMA, "type": "object", "required": ["detail"],
    "properties": {
        "detail": {"type": "string", "description": "What is wrong, in words."},
        "errors": {"type": "array", "description": "Validation errors, one per field.",
                   "items": {"type": "object", "required": ["field", "message"],
                             "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}},
        "retry_after": {"type": "integer", "description": "429: seconds to wait (also the Retry-After header)."},
    },
}
WHY = {
    400: "The body is not JSON (or not UTF-8).",
    401: "No working API token or session.",
    403: "Your role does not allow this (or a session request without its CSRF token).",
    404: "No such object in your organisation.",
    409: "A conflict: a name taken, a decision already made, a state that changed meanwhile.",
    413: "The body is too large.",
    422: "A parameter or field is invalid; `errors` names each.",
    429: "Too many failed API tokens from this address or with this prefix; see Retry-After.",
}
WRITES = {"post", "put", "patch", "delete"}


def error_statuses(path: str, method: str, operation: dict[str, Any]) -> list[int]:
    statuses: set[int] = set()
    if operation.get("security"):
        statuses |= {401, 403, 429}
    if "{" in path:
        statuses.add(404)
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.add(422)
    if operation.get("requestBody"):
        statuses |= {400, 413}
    if method in WRITES:
        statuses.add(409)
    return sorted(statuses)


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Adds each operation's 4xx answers (and the Error schema) to an OpenAPI document, in place."""
    schema.setdefault("components", {}).setdefault("schemas", {})[ERROR_SCHEMA] = ERROR
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in error_statuses(path, method, operation):
                responses.setdefault(str(status), {
                    "description": WHY[status], "content": {"application/json": {"schema": REF}}})
                if status == 429:
                    responses[str(status)]["headers"] = {
                        "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}}
    return schema
