"""Template tags shared by every page: inline help from apps/web/help.py and times people can read."""

from __future__ import annotations

import json
from datetime import datetime

from django import template

from apps.web.help import TOPICS, explain

register = template.Library()


@register.inclusion_tag("web/partials/_help_topic.html")
def help_topic(topic: str, open: bool = False) -> dict:
    """A collapsible "What do these mean?" list for one topic (trust_tier, risk, policy, ...)."""
    title, items = TOPICS[topic]
    return {"title": title, "items": items, "topic": topic, "open": open}


@register.simple_tag
def help_text(topic: str, key: str) -> str:
    return explain(topic, str(key))


@register.inclusion_tag("web/partials/_time.html")
def when(value: datetime | None, empty: str = "never") -> dict:
    """A <time> element: relative text from the server, rewritten to the reader's zone by localtime.js."""
    return {"value": value, "empty": empty}


@register.filter(name="as_json")
def as_json(value: object, indent: int = 2) -> str:
    """A value as the JSON a tool sees (true/null, double quotes), not Python's repr; autoescaped."""
    return json.dumps(value, indent=indent or None, sort_keys=True, ensure_ascii=False, default=str)


@register.filter(name="as_value")
def as_value(value: object) -> object:
    """A single value in a table cell: text stays text, anything else is compact JSON (true, not True)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
