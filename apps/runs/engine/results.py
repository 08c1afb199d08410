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


def scannable_text(payload: dict[str, Any]) -> str:
    """What the scanners read: the result's text plus every string inside its JSON (structured content,
    or the text itself when it is JSON), decoded: an instruction on its own line inside a JSON string
    value is escaped (`\\n`) in the text, where a line-based check cannot see it, but a model reads it."""
    data = payload.get("structured")
    if data is None:
        try:
            data = json.loads(payload.get("text") or "")
        except ValueError:
            data = None
    return "\n".join([payload.get("text") or "", *_strings(data)])


def _strings(value: Any, depth: int = 0) -> list[str]:
    if depth > 20:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v, depth + 1)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, depth + 1)]
    return []


def injected_call_findings(text: str, *, where: str) -> list[dict[str, str]]:
    """Lines that ask for tool calls (`CALL tool {...}`, tool-call markup): data must not drive tools."""
    if _CALL_LINE.search(text) or _TOOL_SYNTAX.search(text):
        return [{"code": "tool_call_in_output", "severity": "high", "where": where,
                 "message": "The tool result contains what looks like a tool call for the model to make."}]
    return []
