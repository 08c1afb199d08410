"""Times in query strings are instants: ISO 8601 text, converted to UTC as they are parsed.

ISO 8601 lets a client write any offset up to +-23:59; Postgres stores at most +-15:59 and refused
the rest mid-query. The instant is the same in UTC, and every backend takes it.

Pydantic would also read a bare number (`?until=0.5`) as seconds since 1970: a typo or a wrong
unit that silently filters everything. Only a date and time written as such is an instant here.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def _written_out(value: Any) -> Any:
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("Give an ISO 8601 date or date and time (e.g. 2026-01-31 or 2026-01-31T09:00:00Z), "
                         "not a number.")
    return value


def _in_utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo is not None else value


Instant = Annotated[datetime, BeforeValidator(_written_out), AfterValidator(_in_utc)]
Day = Annotated[date, BeforeValidator(_written_out)]
