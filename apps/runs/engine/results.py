"""Tool results as the engine stores and shows them: size-capped text, scanned for instructions."""

from __future__ import annotations

import json
import re
from typing import Any

RESULT_TEXT_CAP = 8000  # characters of a result the model (and the ledger) receive
STRUCTURED_CAP = 16000  # characters of structured content kept in the ledger
_CALL_LINE = re.compile(r"^\s*CALL\s+[A-Za-z0-9_.\-]+\s+\{", re.MULTILINE)
_TOOL_SYNTAX = re.compile(r"<\s*(tool_call|function_call|invoke)\b|\"tool_calls\"\s*:", re.IGNORECASE)


def result_payload(result: Any) -> dict[str, Any]:
    """{"text", "is_error", "structured", "truncated"} with the text capped."""
    text = result.text
    if result.structured_content is not None and not text.strip():
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    truncated = len(text) > RESULT_TEXT_CAP
    if truncated:
        text = text[:RESULT_TEXT_CAP] + f"\n[... truncated: {len(text) - RESULT_TEXT_CAP} more characters]"
    structured = result.structured_content
    if structured is not None and len(json.dumps(structured, default=str)) > STRUCTURED_CAP:
        structured, truncated = None, True
    return {"text": text, "is_error": bool(result.is_error), "structured": structured, "truncated": truncated}


def injected_call_findings(text: str, *, where: str) -> list[dict[str, str]]:
    """Lines that ask for tool calls (`CALL tool {...}`, tool-call markup): data must not drive tools."""
    if _CALL_LINE.search(text) or _TOOL_SYNTAX.search(text):
        return [{"code": "tool_call_in_output", "severity": "high", "where": where,
                 "message": "The tool result contains what looks like a tool call for the model to make."}]
    return []
