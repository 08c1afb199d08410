"""The API's request parser: JSON as usual, but text the database cannot store (NUL characters,
lone UTF-16 surrogates) is refused here, as a client error, instead of failing in a query."""

from __future__ import annotations

import json
from typing import Any

from ninja.errors import ValidationError
from ninja.parser import Parser

UNSTORABLE = "Text may not contain NUL characters or unpaired surrogates."


def storable(value: Any) -> bool:
    """True when every string in `value` (keys included) can be stored as UTF-8 text."""
    if isinstance(value, str):
        if "\x00" in value:
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(storable(k) and storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(storable(v) for v in value)
    return True


class StrictParser(Parser):
    def parse_body(self, request):
        data = json.loads(request.body)  # a failure becomes 400 "Cannot parse request body"
        if not storable(data):
            raise ValueError(UNSTORABLE)
        return data

    def parse_querydict(self, data, list_fields, request):
        for key, values in data.lists():
            if not storable([key, *values]):
                raise ValidationError([{"loc": ["query", key], "msg": UNSTORABLE}])
        return super().parse_querydict(data, list_fields, request)
