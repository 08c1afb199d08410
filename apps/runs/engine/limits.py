"""Checks before every model call (token and dollar budgets) and the run's other limits.

`PRE_CALL_CHECKS` is the one list the engine runs before each model call; add org, crew or
agent (monthly) budgets by appending a function `check(ctx) -> LimitHit | None`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from apps.costs.pricing import price_call
from apps.costs.selectors import call_refusal

DEFAULT_MAX_TOKENS = 1024
REPEAT_LIMIT = 2  # the same tool + arguments may run twice; the second repeat stops the run


@dataclass(frozen=True)
class PreCallContext:
    org_id: UUID | str
    run_id: UUID | str
    crew_id: str | None
    agent_id: str
    agent_name: str
    provider: str
    model: str
    prompt_tokens: int  # estimated from the messages and tool definitions about to be sent
    max_tokens: int
    run_tokens: int  # used so far (in + out)
    run_cost_usd: Decimal | None  # None: some call had an unknown price
    token_budget: int | None
    budget_usd: Decimal | None
    has_budgets: bool = True  # False: no org, crew, agent or run budget counts this call (skip the lookup)

    @property
    def estimated_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True)
class LimitHit:
    message: str


def estimate_tokens(*parts: Any, chars: int = 0) -> int:
    """A rough count (4 characters a token) of what is about to be sent: `parts` as JSON, plus `chars`
    already counted (a turn's history, whose JSON length the run store keeps as it grows)."""
    return (chars + sum(len(json.dumps(p, default=str)) for p in parts)) // 4 + 1


def token_budget(ctx: PreCallContext) -> LimitHit | None:
    if ctx.token_budget is None:
        return None
    if ctx.run_tokens + ctx.estimated_tokens > ctx.token_budget:
        return LimitHit(f"Token budget: the next call to {ctx.model} could use about {ctx.estimated_tokens} tokens "
                        f"and the run has used {ctx.run_tokens} of its {ctx.token_budget}.")
    return None


def dollar_budget(ctx: PreCallContext) -> LimitHit | None:
    if ctx.budget_usd is None:
        return None
    estimate = price_call(org_id=ctx.org_id, provider=ctx.provider, model=ctx.model,
                          input_tokens=ctx.prompt_tokens, output_tokens=ctx.max_tokens).cost_usd
    spent = ctx.run_cost_usd
    if spent is None or estimate is None:
        return LimitHit(f"Dollar budget: the price of {ctx.model} is unknown, so a budget of "
                        f"${ctx.budget_usd} cannot be kept. Set a price for the model under Costs.")
    if spent + estimate > ctx.budget_usd:
        return LimitHit(f"Dollar budget: the next call could cost about ${estimate:.4f} and the run has spent "
                        f"${spent:.4f} of its ${ctx.budget_usd}.")
    return None


def org_budgets(ctx: PreCallContext) -> LimitHit | None:
    """The org's budgets (Costs page): monthly for the org, the crew and the agent, and per run."""

    if not ctx.has_budgets:
        return None
    estimate = price_call(org_id=ctx.org_id, provider=ctx.provider, model=ctx.model,
                          input_tokens=ctx.prompt_tokens, output_tokens=ctx.max_tokens).cost_usd
    message = call_refusal(org_id=ctx.org_id, crew_id=ctx.crew_id, agent_id=ctx.agent_id, run_id=ctx.run_id,
                           run_cost_usd=ctx.run_cost_usd, next_cost_usd=estimate)
    return LimitHit(f"Budget: {message}") if message else None


PRE_CALL_CHECKS: list[Callable[[PreCallContext], LimitHit | None]] = [token_budget, dollar_budget, org_budgets]


def check_before_call(ctx: PreCallContext) -> LimitHit | None:
    """The first limit the next model call would break, or None."""
    for check in PRE_CALL_CHECKS:
        hit = check(ctx)
        if hit is not None:
            return hit
    return None
