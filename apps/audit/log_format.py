"""The log format every process uses: each line, traceback included, with credential shapes masked.

A log line has no organisation to look secret values up for, and must not query to write itself:
text from outside is redacted by value (`apps.audit.org_secrets`) where it enters the app; this is
the line behind it, for whatever an exception or a library writes on its way out.
"""

from __future__ import annotations

import logging

from apps.audit.redaction import redact_text


class RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
