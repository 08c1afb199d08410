"""The form an elicitation asks for: MCP restricts `requestedSchema` to a flat object of primitive fields
(string, number, integer, boolean, enums). `form_fields` turns it into what the inbox renders;
`content_errors` checks what a person sent against it (jsonschema), per field."""

from __future__ import annotations

import contextlib
from typing import Any

import jsonschema

PRIMITIVES = ("string", "number", "integer", "boolean")


def form_fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"name", "label", "type", "required", "choices", "description"}] in the schema's order."""
    required = set(schema.get("required") or [])
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type") if prop.get("type") in PRIMITIVES else "string"
        choices = prop.get("enum") or [o.get("const") for o in prop.get("oneOf") or [] if isinstance(o, dict)]
        fields.append({"name": name, "label": prop.get("title") or name, "type": kind, "required": name in required,
                       "choices": [c for c in choices if c is not None], "description": prop.get("description", "")})
    return fields


def coerce(schema: dict[str, Any], raw: dict[str, str]) -> dict[str, Any]:
    """Form posts are strings: each to its field's type (a bad number stays a string, so the check names it)."""
    out: dict[str, Any] = {}
    for field in form_fields(schema):
        value = raw.get(field["name"])
        if field["type"] == "boolean":
            out[field["name"]] = value in ("on", "true", "1", True)
            continue
        if value in (None, ""):
            continue
        if field["type"] in ("number", "integer"):
            with contextlib.suppress(TypeError, ValueError):
                value = int(value) if field["type"] == "integer" else float(value)
        out[field["name"]] = value
    return out


def content_errors(schema: dict[str, Any], content: Any) -> dict[str, str]:
    if not isinstance(content, dict):
        return {"content": "Must be an object with the form's fields."}
    errors: dict[str, str] = {}
    checked = {"type": "object", "properties": schema.get("properties") or {}, "required": schema.get("required") or []}
    for error in jsonschema.Draft202012Validator(checked).iter_errors(content):
        path = ".".join(str(p) for p in error.absolute_path)
        if not path and error.validator == "required":
            path = str(error.message.split("'")[1]) if "'" in error.message else ""
        errors[f"content.{path}" if path else "content"] = error.message
    return errors
