"""Writes for costs: usage rows (one per model call) and price overrides."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.audit import services as audit
from apps.costs.models import ModelPrice, UsageRecord
from apps.costs.pricing import price_call


def record_usage(*, org_id: UUID | str, provider: str, model: str, input_tokens: int, output_tokens: int,
                 cached_tokens: int = 0, latency_ms: int = 0, run_id: UUID | str | None = None,
                 crew_id: UUID | str | None = None, agent_id: UUID | str | None = None) -> UsageRecord:
    """Prices one model call now (override, genai-prices, or unknown) and stores it. Called by the engine."""
    price = price_call(org_id=org_id, provider=provider, model=model, input_tokens=input_tokens,
                       output_tokens=output_tokens, cached_tokens=cached_tokens)
    return UsageRecord.objects.create(
        org_id=org_id, run_id=run_id, crew_id=crew_id, agent_id=agent_id, provider=provider, model=model,
        input_tokens=input_tokens, cached_tokens=cached_tokens, output_tokens=output_tokens,
        cost_usd=price.cost_usd, price_source=price.source, latency_ms=latency_ms)


def set_model_price(*, actor: Actor, model: str, input_per_mtok: Decimal, output_per_mtok: Decimal,
                    cached_per_mtok: Decimal | None = None, provider: str = "",
                    effective_from: datetime | None = None, note: str = "") -> ModelPrice:
    """Adds (or replaces, for the same start) the organisation's price for a model. Audited."""
    actor.require("servers.manage")
    with transaction.atomic():
        price, _ = ModelPrice.objects.update_or_create(
            org_id=actor.org_id, provider=provider, model=model, effective_from=effective_from or timezone.now(),
            defaults={"input_per_mtok": input_per_mtok, "output_per_mtok": output_per_mtok,
                      "cached_per_mtok": cached_per_mtok, "note": note})
        audit.record(org_id=actor.org_id, actor=actor, action="costs.price_set", target=price,
                     target_label=str(price), data={"input_per_mtok": str(input_per_mtok),
                                                    "output_per_mtok": str(output_per_mtok)})
    return price
