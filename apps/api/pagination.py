"""The API's lists (API.md): `?limit=&offset=`, answered as `{"items": [...], "count": N}`.

Both numbers are bounded here, so a value no database column could take is a 422 naming the
parameter on every backend, never the database's own error (or a 500 where SQLite refuses it).
"""

from __future__ import annotations

from ninja import Field, Schema
from ninja.pagination import LimitOffsetPagination

PAGE = 100
MAX_LIMIT = 1000
MAX_OFFSET = 2**63 - 1  # the largest 64-bit integer: what Postgres and SQLite take in OFFSET


class Pagination(LimitOffsetPagination):
    class Input(Schema):
        limit: int = Field(PAGE, ge=1, le=MAX_LIMIT)
        offset: int = Field(0, ge=0, le=MAX_OFFSET)

    def __init__(self, **kwargs):
        super().__init__(max_limit=MAX_LIMIT, **kwargs)
