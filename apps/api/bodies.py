"""Request bodies are JSON, and JSON has types: a body's fields take values of their own JSON type.

Pydantic's lax mode would turn `1` into `true`, `6.0` or `"6"` into `6`, `0.5` into an instant in
1970, and (through ninja's attribute getter) an array or a number into an object whose fields all
take their defaults. Every API request body schema derives from `Body`, which refuses those with a
422 naming the field; nested bodies check their own fields.
"""

from __future__ import annotations

import types
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from ninja import Schema
from pydantic import ValidationError, ValidationInfo, ValidatorFunctionWrapHandler, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

_NAMES = {str: "a string", bool: "true or false", int: "a whole number", float: "a number",
          Decimal: "a number or a numeric string", datetime: "an ISO 8601 date and time as a string",
          date: "an ISO 8601 date as a string",
          dict: "an object", list: "an array"}


def _accepts(annotation: Any, value: Any) -> bool:
    """Whether a JSON `value` has a type `annotation` takes (formats are pydantic's to check)."""
    origin = get_origin(annotation)
    if annotation is Any or annotation is None or origin is Literal:
        return annotation is not None or value is None
    if origin is Annotated:
        return _accepts(get_args(annotation)[0], value)
    if origin in (Union, types.UnionType):
        return any(_accepts(arg, value) for arg in get_args(annotation))
    if origin in (list, set, tuple):
        args = get_args(annotation)
        return isinstance(value, list) and all(_accepts(args[0], item) for item in value) if args else isinstance(
            value, list)
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    if isinstance(annotation, type):
        return _accepts_type(annotation, value)
    return True


def _accepts_type(annotation: type, value: Any) -> bool:
    if annotation is type(None):
        return value is None
    if issubclass(annotation, Schema):
        return isinstance(value, dict)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (float, Decimal):
        return (isinstance(value, int | float) and not isinstance(value, bool)) or (
            annotation is Decimal and isinstance(value, str))
    if annotation in (datetime, date):
        return isinstance(value, str)
    if annotation is str:
        return isinstance(value, str)
    return True


def _expected(annotation: Any) -> str:
    names = [_NAMES.get(arg, "") if isinstance(arg, type) and not issubclass(arg, Schema) else "an object"
             for arg in (get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else [annotation])
             if arg is not type(None)]
    if get_origin(annotation) in (Union, types.UnionType):
        lists = [arg for arg in get_args(annotation) if get_origin(arg) in (list, set, tuple)]
        annotation = lists[0] if lists else annotation
    if get_origin(annotation) in (list, set, tuple):
        items = get_args(annotation)
        return f"an array whose items are each {_expected(items[0])}" if items else "an array"
    return " or ".join(n for n in names if n) or "another type of value"


class Body(Schema):
    @model_validator(mode="wrap")
    @classmethod
    def _json_types(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if "response_status" in (info.context or {}):  # an answer being serialised, not a request
            return handler(value)
        if not isinstance(value, dict):
            raise PydanticCustomError("json_object", "Send a JSON object here, not {got}.",
                                      {"got": _json_name(value)})
        errors: list[InitErrorDetails] = []
        for name, field in cls.model_fields.items():
            key = field.alias or name
            if key in value and not _accepts(field.annotation, value[key]):
                errors.append(InitErrorDetails(
                    type=PydanticCustomError("json_type", "Expected {expected}, got {got}.",
                                             {"expected": _expected(field.annotation), "got": _json_name(value[key])}),
                    loc=(key,), input=value[key]))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors + _other_errors(value, errors, handler))
        return handler(value)


def _other_errors(value: dict, errors: list[InitErrorDetails], handler: ValidatorFunctionWrapHandler
                  ) -> list[InitErrorDetails]:
    """What the schema says about the other fields, so one answer names every wrong field."""
    wrong = {error["loc"][0] for error in errors}
    try:
        handler({k: v for k, v in value.items() if k not in wrong})
    except ValidationError as exc:
        return [InitErrorDetails(type=PydanticCustomError(e["type"], e["msg"].replace("{", "(").replace("}", ")")),
                                 loc=e["loc"], input=e.get("input"))
                for e in exc.errors() if e["loc"] and e["loc"][0] not in wrong]
    return []


def _json_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
