"""Money in templates: an unknown cost reads "unknown", never "$0"."""

from __future__ import annotations

from decimal import Decimal

from django import template

register = template.Library()


@register.filter
def usd(value: Decimal | float | None, places: int = 4) -> str:
    if value is None:
        return "unknown"
    return f"${Decimal(str(value)):,.{int(places)}f}"


@register.filter
def spend(row) -> str:
    """A spend row's cost, saying how many calls had no known price (their cost is not included)."""
    if row.cost_usd is None:
        return f"unknown ({row.unknown_calls} calls without a price)"
    text = usd(row.cost_usd)
    if row.unknown_calls:
        text += f" + {row.unknown_calls} calls at unknown price"
    return text
