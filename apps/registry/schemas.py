"""Checking a tool call's arguments against the tool's input schema: the engine and the gateway both ask."""

from __future__ import annotations

from typing import Any

import jsonschema


def input_validator(schema: dict[str, Any] | None) -> Any:
    """A validator for a tool's input schema, or None when there is nothing to check against (no schema,
    or one that is not a valid JSON Schema: the registry's sync reports those). Checking the schema against
    its metaschema costs more than validating arguments with it: callers keep the validator."""
    if not schema:
        return None
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


def arguments_problem(validator: Any, arguments: dict[str, Any]) -> str:
    """The most relevant problem with the arguments, with where it is ("items.0.qty: ..."), or ''."""
    if validator is None:
        return ""
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return ""
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"
