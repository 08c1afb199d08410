"""What a model call cost: the organisation's own price first, then genai-prices, else unknown.

Unknown is `None`, never zero: a self-hosted or brand-new model has no public price, and
budgets and reports must say "unknown" rather than pretend it was free. The scripted model is
built in and free.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from uuid import UUID

import genai_prices
from django.utils import timezone

from apps.core.rows import Columns, fetch
from apps.costs.models import ModelPrice

# The note on the demo's example price (apps/demo seeds it): the costs page marks prices carrying it as not real.
EXAMPLE_PRICE_NOTE = "Example price for the demo's scripted model, so the charts show something: not a real cost."

MILLION = Decimal(1_000_000)
GENAI_SOURCE = f"genai-prices {genai_prices.__version__}"
# Airlock provider kinds -> genai-prices provider ids (None: match the model name alone).
PROVIDER_IDS = {"openai": "openai", "anthropic": "anthropic", "openai_compatible": None}


@dataclass(frozen=True)
class Price:
    cost_usd: Decimal | None  # None: unknown
    source: str  # which price was used, stored with the usage row


UNSET = object()


def price_call(*, org_id: UUID | str, provider: str, model: str, input_tokens: int, output_tokens: int,
               cached_tokens: int = 0, at: datetime | None = None, override: ModelPrice | object | None = UNSET
               ) -> Price:
    """The cost of one call. `input_tokens` includes `cached_tokens` (as providers report them).

    `override`: the org's price row for this model as the caller already looked it up (`find_override`,
    None for none), so a worker reads it once per task rather than per call."""
    at = at or timezone.now()
    if override is UNSET:
        override = find_override(org_id=org_id, provider=provider, model=model, at=at)
    if override is not None:
        cached_rate = override.cached_per_mtok if override.cached_per_mtok is not None else override.input_per_mtok
        cost = ((input_tokens - cached_tokens) * override.input_per_mtok + cached_tokens * cached_rate
                + output_tokens * override.output_per_mtok) / MILLION
        return Price(cost.quantize(Decimal("0.00000001")), f"override:{override.id}")
    if provider == "scripted":
        return Price(Decimal(0), "scripted (built in, free)")
    try:
        calc = genai_prices.calc_price(
            genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached_tokens),
            model_ref=model, provider_id=PROVIDER_IDS.get(provider), genai_request_timestamp=at)
    except LookupError:
        return Price(None, "unknown")
    return Price(Decimal(calc.total_price).quantize(Decimal("0.00000001")), GENAI_SOURCE)


def find_override(*, org_id: UUID | str, provider: str, model: str, at: datetime | None = None) -> ModelPrice | None:
    return override_from(fetch(*override_statement(org_id=org_id, provider=provider, model=model, at=at)))


def override_statement(*, org_id: UUID | str, provider: str, model: str, at: datetime | None = None
                       ) -> tuple[str, list]:
    """The read of the org's price for the model in force at `at` (now), the one that applies first: the latest,
    and of two from the same moment the one naming the provider over the one for any provider. As a statement
    (SQL built once per process: apps/core/rows.py) so that a worker can send it with its other reads;
    `override_from` reads its rows."""
    price, sql = _override_read()
    return sql, [price.param("org", org_id), model, price.param("effective_from", at or timezone.now()), provider]


def override_from(rows: list[tuple]) -> ModelPrice | None:
    return _override_read()[0].instance(rows[0]) if rows else None


@functools.cache
def _override_read() -> tuple[Columns, str]:
    price = Columns.every(ModelPrice, "p")
    return price, (f"SELECT {price.sql} FROM {price.table} p WHERE p.org_id = %s AND p.model = %s "  # noqa: S608
                   "AND p.effective_from <= %s AND (p.provider = %s OR p.provider = '') "
                   "ORDER BY p.effective_from DESC, p.provider DESC LIMIT 1")
