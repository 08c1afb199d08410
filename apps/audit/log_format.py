"""The log formats every process uses: each line, traceback included, with credential shapes masked.

A log line has no organisation to look secret values up for, and must not query to write itself:
text from outside is redacted by value (`apps.audit.org_secrets`) where it enters the app; this is
the line behind it, for whatever an exception or a library writes on its way out.

`plain` (the default in DEBUG) is for a person at a terminal; `json` (the default otherwise,
`AIRLOCK_LOG_FORMAT`) is one object per line for a log pipeline, with the context the code bound
(`apps.core.log_context`: request, org, actor, run, tool call).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from apps.audit.redaction import redact_text
from apps.core import log_context


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "process": record.process,
            "process_name": record.processName,
            "message": redact_text(record.getMessage()),
            **log_context.current(),
        }
        if record.exc_info:
            line["exception"] = redact_text(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = redact_text(self.formatStack(record.stack_info))
        return json.dumps(line, ensure_ascii=False, default=str)
