"""Template tags shared by every page: inline help from apps/web/help.py and times people can read."""

from __future__ import annotations

import json
from datetime import datetime

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils import dateformat
from django.utils.html import conditional_escape, format_html
from django.utils.timezone import template_localtime

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


@register.simple_tag
def when(value: datetime | None, empty: str = "never") -> str:
    """A <time> element: relative text from the server, rewritten to the reader's zone by localtime.js; `empty`
    without a time. Built here rather than from a template: the run page shows one per event, and an included
    template per event was most of its live panels' render (bench/load.py)."""
    if not value:
        return conditional_escape(empty)
    local = template_localtime(value)  # what the `date` filter formats
    return format_html('<time datetime="{}" title="{}">{}</time>', dateformat.format(local, "c"),
                       dateformat.format(local, "Y-m-d H:i e"), naturaltime(value))


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
