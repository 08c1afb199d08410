"""Writes for costs: usage rows (one per model call), price overrides, budgets and their alerts.

Budget alerts: after each usage row, every budget the call counts against is compared with its
thresholds; a threshold crossed for the first time in the period writes a `BudgetAlert`, an
audit row, an org realtime event `budget.threshold` and calls each of `BUDGET_NOTIFIERS` (the
other notifiers) after commit; webhooks and email go through `apps.notifications.services.notify`
(event `budget.alert`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.audit import services as audit
from apps.core.errors import NotFound, ValidationFailed
from apps.core.realtime import org_group, publish_after_commit
from apps.core.rows import Inserts
from apps.costs import rollup, selectors
from apps.costs.models import DEFAULT_THRESHOLDS, Budget, BudgetAlert, BudgetScope, ModelPrice, UsageRecord
from apps.costs.pricing import UNSET, Price, price_call
from apps.notifications import services as notifications

logger = logging.getLogger(__name__)

# Called after commit with each new BudgetAlert, for anything beyond notifications' webhooks and email.
BUDGET_NOTIFIERS: list[Callable[[BudgetAlert], None]] = []


@functools.cache
def _usage_inserts() -> Inserts:  # a usage row per model call, on the engine's step path (apps/core/rows.py)
    return Inserts(UsageRecord)


def record_usage(*, org_id: UUID | str, provider: str, model: str, input_tokens: int, output_tokens: int,
                 cached_tokens: int = 0, latency_ms: int = 0, run_id: UUID | str | None = None,
                 crew_id: UUID | str | None = None, agent_id: UUID | str | None = None,
                 at: datetime | None = None, override: Any = UNSET, firsts: rollup.FirstCalls | None = None,
                 budgets: bool = True, price: Price | None = None) -> UsageRecord:
    """Prices one model call now (override, genai-prices, or unknown) and stores it. Called by the engine.

    The usage row and its day's `DailySpend` row change in one transaction. `at` (default now) is for
    loading history: calls of a run must then be recorded in time order (see `apps.costs.rollup`).
    What the engine's run store already knows it passes in, so a model call costs no extra reads: the
    price `override` (see `price_call`), `firsts` (else `rollup.first_calls` asks the table) and
    `budgets=False` when no budget counts this call (no threshold to check), and the `price` it computed
    already (with `price_call`).
    """
    price = price or price_call(org_id=org_id, provider=provider, model=model, input_tokens=input_tokens,
                       output_tokens=output_tokens, cached_tokens=cached_tokens, at=at, override=override)
    with transaction.atomic(savepoint=False):  # joins the engine's step transaction: no savepoint round trips
        if firsts is None:
            firsts = rollup.first_calls(org_id=org_id, run_id=run_id, agent_id=agent_id, provider=provider,
                                        model=model)
        record = UsageRecord(
            org_id=org_id, run_id=run_id, crew_id=crew_id, agent_id=agent_id, provider=provider, model=model,
            input_tokens=input_tokens, cached_tokens=cached_tokens, output_tokens=output_tokens,
            cost_usd=price.cost_usd, price_source=price.source, latency_ms=latency_ms)
        _usage_inserts().send([record])
        if at is not None:  # auto_now_add stamps now: a call from history keeps its time
            record.created_at = at
            UsageRecord.objects.filter(id=record.id).update(created_at=at)
        rollup.increment(org_id=org_id, day=record.created_at.astimezone(UTC).date(), run_id=run_id,
                         crew_id=crew_id, agent_id=agent_id, provider=provider, model=model, input_tokens=input_tokens,
                         cached_tokens=cached_tokens, output_tokens=output_tokens, cost_usd=price.cost_usd,
                         firsts=firsts)
        if budgets:
            alert_thresholds(org_id=org_id, crew_id=crew_id, agent_id=agent_id, run_id=run_id)
    return record


def set_model_price(*, actor: Actor, model: str, input_per_mtok: Decimal, output_per_mtok: Decimal,
                    cached_per_mtok: Decimal | None = None, provider: str = "",
                    effective_from: datetime | None = None, note: str = "") -> ModelPrice:
    """Adds (or replaces, for the same start) the organisation's price for a model. Audited."""
    actor.require("costs.manage")
    with transaction.atomic():
        price, _ = ModelPrice.objects.update_or_create(
            org_id=actor.org_id, provider=provider, model=model, effective_from=effective_from or timezone.now(),
            defaults={"input_per_mtok": input_per_mtok, "output_per_mtok": output_per_mtok,
                      "cached_per_mtok": cached_per_mtok, "note": note})
        audit.record(org_id=actor.org_id, actor=actor, action="costs.price_set", target=price,
                     target_label=str(price), data={"input_per_mtok": str(input_per_mtok),
                                                    "output_per_mtok": str(output_per_mtok),
                                                    "cached_per_mtok": None if cached_per_mtok is None
                                                    else str(cached_per_mtok),
                                                    "provider": provider,
                                                    "effective_from": price.effective_from.isoformat()})
    return price


def delete_model_price(*, actor: Actor, price_id: UUID | str) -> None:
    """Removes a price override; calls already recorded keep the cost they were priced at. Audited."""
    actor.require("costs.manage")
    with transaction.atomic():
        price = selectors.org_prices(org_id=actor.org_id).filter(id=price_id).first()
        if price is None:
            raise NotFound("No such price.")
        audit.record(org_id=actor.org_id, actor=actor, action="costs.price_deleted", target=price,
                     target_label=str(price), data={"input_per_mtok": str(price.input_per_mtok),
                                                    "output_per_mtok": str(price.output_per_mtok)})
        price.delete()


# --- budgets -------------------------------------------------------------------------------------

def clean_budget(*, scope: str, amount_usd: Any, thresholds: Any) -> tuple[Decimal, list[int]]:
    errors = {}
    if scope not in BudgetScope.values:
        errors["scope"] = "Choose the organisation, a crew, an agent or each run."
    try:
        amount = Decimal(str(amount_usd).strip()).quantize(Decimal("0.0001"))
        if not amount.is_finite() or amount <= 0:
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        errors["amount_usd"] = "An amount in dollars above zero, e.g. 250 or 12.50."
        amount = Decimal(0)
    if isinstance(thresholds, str):
        thresholds = [t for t in thresholds.replace(" ", "").split(",") if t]
    try:
        marks = sorted({int(t) for t in (thresholds or DEFAULT_THRESHOLDS)})
        if not marks or marks[0] < 1 or marks[-1] > 100:
            raise ValueError
    except (TypeError, ValueError):
        errors["thresholds"] = "Percents between 1 and 100, separated by commas, e.g. 50, 80, 100."
        marks = []
    if errors:
        raise ValidationFailed("The budget is not valid.", errors)
    return amount, sorted({*marks, 100})


def set_budget(*, actor: Actor, scope: str, amount_usd: Any, target_id: UUID | str | None = None,
               target_label: str = "", thresholds: Any = None) -> Budget:
    """Creates or changes the budget of a scope (org, crew, agent per month; each run). Audited with the change.

    The caller (a view or router) resolves `target_label` from the crew or agent it checked belongs
    to the organisation. Raises ValidationFailed, PermissionDenied.
    """
    actor.require("costs.manage")
    amount, marks = clean_budget(scope=scope, amount_usd=amount_usd, thresholds=thresholds)
    if scope in (BudgetScope.CREW, BudgetScope.AGENT) and not target_id:
        raise ValidationFailed(f"Pick the {scope}.", {"target_id": f"Pick the {scope}."})
    target = target_id if scope in (BudgetScope.CREW, BudgetScope.AGENT) else None
    with transaction.atomic():
        budget = Budget.objects.select_for_update().filter(org_id=actor.org_id, scope=scope, target_id=target).first()
        before = None if budget is None else {"amount_usd": str(budget.amount_usd), "thresholds": budget.thresholds}
        if budget is None:
            budget = Budget(org_id=actor.org_id, scope=scope, target_id=target)
        budget.amount_usd, budget.thresholds, budget.target_label = amount, marks, target_label[:200]
        budget.save()
        audit.record(org_id=actor.org_id, actor=actor, action="costs.budget_set", target=budget,
                     target_label=str(budget), data={"before": before, "after": {"amount_usd": str(amount),
                                                                                 "thresholds": marks}})
    return budget


def delete_budget(*, actor: Actor, budget_id: UUID | str) -> None:
    actor.require("costs.manage")
    with transaction.atomic():
        budget = selectors.get_budget(org_id=actor.org_id, budget_id=budget_id)
        audit.record(org_id=actor.org_id, actor=actor, action="costs.budget_deleted", target=budget,
                     target_label=str(budget), data={"amount_usd": str(budget.amount_usd)})
        budget.delete()


def alert_thresholds(*, org_id: UUID | str, crew_id: UUID | str | None, agent_id: UUID | str | None,
                     run_id: UUID | str | None) -> list[BudgetAlert]:
    """Records each threshold a budget crossed for the first time this period (inside the usage row's transaction)."""
    alerts = []
    for budget in selectors.budgets_for(org_id=org_id, crew_id=crew_id, agent_ids=[agent_id]):
        if budget.scope == BudgetScope.RUN and not run_id:
            continue
        used = selectors.spent(budget, run_id=run_id)
        percent = used * 100 / budget.amount_usd
        period = selectors.period_of(budget, run_id=run_id)
        for mark in budget.thresholds or DEFAULT_THRESHOLDS:
            if percent < mark or BudgetAlert.objects.filter(budget=budget, period=period, threshold=mark).exists():
                continue
            try:
                with transaction.atomic():
                    alert = BudgetAlert.objects.create(org_id=org_id, budget=budget, period=period, threshold=mark,
                                                       spent_usd=used)
            except IntegrityError:
                continue  # another worker recorded it first
            alerts.append(alert)
            _announce(alert)
    return alerts


def _announce(alert: BudgetAlert) -> None:
    budget = alert.budget
    audit.record(org_id=budget.org_id, actor=None, action="costs.budget_threshold", target=budget,
                 target_label=str(budget), data={"threshold": alert.threshold, "period": alert.period,
                                                 "spent_usd": str(alert.spent_usd),
                                                 "amount_usd": str(budget.amount_usd)})
    publish_after_commit(org_group(budget.org_id), "budget.threshold", budget_id=str(budget.id),
                         threshold=alert.threshold, scope=budget.scope, period=alert.period)
    notifications.notify(org_id=budget.org_id, event="budget.alert", payload={
        "budget_id": str(budget.id), "scope": budget.scope, "target": budget.target_label,
        "threshold": alert.threshold, "period": alert.period, "spent_usd": str(alert.spent_usd),
        "amount_usd": str(budget.amount_usd)})  # webhooks and email, sent after commit
    transaction.on_commit(lambda: _notify(alert))


def _notify(alert: BudgetAlert) -> None:
    for notify in BUDGET_NOTIFIERS:
        try:
            notify(alert)
        except Exception:  # a failing notifier must not fail the model call that crossed the line
            logger.exception("budget notifier %r failed", notify)
