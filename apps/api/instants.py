"""Times in query strings are instants: converted to UTC as they are parsed.

ISO 8601 lets a client write any offset up to +-23:59; Postgres stores at most +-15:59 and refused
the rest mid-query. The instant is the same in UTC, and every backend takes it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def _in_utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo is not None else value


Instant = Annotated[datetime, AfterValidator(_in_utc)]
