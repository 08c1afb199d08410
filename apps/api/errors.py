"""Domain errors and framework errors become JSON `{"detail": ...}` here, and only here."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from apps.api.lockout import LockedOut
from apps.api.parsing import UNSTORABLE
from apps.core.errors import Conflict, DomainError, NotFound, PermissionDenied, ValidationFailed

STATUS = {NotFound: 404, PermissionDenied: 403, Conflict: 409, ValidationFailed: 422}


_SOURCES = ("body", "query", "path", "header", "payload", "data", "filters")


def _field(loc: list) -> str:
    # ("body", "payload", "email") -> "email"; ("query", "filters", "since", "function-after[...]") -> "since":
    # the names of a union's branches are pydantic's, not the client's.
    parts = [str(p) for p in loc if p not in _SOURCES and not (isinstance(p, str) and "[" in p)]
    return ".".join(parts) or "body"


def install(api: NinjaAPI) -> None:
    @api.exception_handler(DomainError)
    def domain_error(request, exc: DomainError):
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 400)
        body: dict = {"detail": exc.message}
        if isinstance(exc, ValidationFailed) and exc.errors:
            body["errors"] = [{"field": f, "message": m} for f, m in exc.errors.items()]
        return api.create_response(request, body, status=status)

    @api.exception_handler(ValidationError)
    def validation_error(request, exc: ValidationError):
        errors = []
        for e in exc.errors:
            error = {"field": _field(list(e.get("loc", []))), "message": e.get("msg", "Invalid value.")}
            if error not in errors:  # each branch of a union says the same about one field
                errors.append(error)
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "Invalid request."
        return api.create_response(request, {"detail": detail, "errors": errors}, status=422)

    @api.exception_handler(LockedOut)
    def locked_out(request, exc: LockedOut):
        source = "this address" if exc.by == "address" else "tokens with this prefix"
        response = api.create_response(
            request, {"detail": f"Too many failed API tokens from {source}: try again in {exc.retry_after} s.",
                      "retry_after": exc.retry_after}, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request, exc):
        return api.create_response(
            request, {"detail": "Authentication required: send a valid API token as 'Authorization: Bearer ...'."},
            status=401,
        )

    @api.exception_handler(HttpError)
    def http_error(request, exc: HttpError):
        cause = exc.__cause__  # ninja wraps every body parsing failure as a 400
        if isinstance(cause, json.JSONDecodeError):
            return api.create_response(
                request, {"detail": f"The request body is not valid JSON: {cause.msg} at position {cause.pos}."},
                status=400)
        if isinstance(cause, UnicodeDecodeError):
            return api.create_response(request, {"detail": "The request body is not UTF-8 text."}, status=400)
        if isinstance(cause, ValueError) and str(cause) == UNSTORABLE:
            return api.create_response(request, {"detail": UNSTORABLE}, status=422)
        return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, exc: RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return api.create_response(
            request, {"detail": f"The request body is too large (at most {limit} bytes)."}, status=413)

    @api.exception_handler(DataError)
    def unstorable_value(request, exc: DataError):
        # The database refused a value the schema let through (a number or date out of its range,
        # text too long): the request's fault, never a server error.
        return api.create_response(
            request, {"detail": "A value in the request is out of range or too long to be stored."}, status=422)

    @api.exception_handler(Http404)
    def not_found(request, exc):
        return api.create_response(request, {"detail": "Not found."}, status=404)
