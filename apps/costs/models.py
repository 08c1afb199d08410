"""Prices and usage: what each model call cost, priced when it happened.

`UsageRecord` refers to runs, crews and agents by UUID only (costs sits below them in the app
order). `cost_usd` NULL means the price was unknown: never store a guess or a zero for it.
"""

from __future__ import annotations

from django.db import models

from apps.core.models import TenantModel


class ModelPrice(TenantModel):
    """An organisation's own price for a model (self-hosted, new, negotiated), from a date on.

    `provider` empty: the price applies to the model under any provider.
    """

    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=200)
    input_per_mtok = models.DecimalField(max_digits=12, decimal_places=6)
    output_per_mtok = models.DecimalField(max_digits=12, decimal_places=6)
    cached_per_mtok = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    effective_from = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "provider", "model", "effective_from"],
                                               name="model_price_org_model_from")]
        ordering = ["model", "-effective_from"]

    def __str__(self) -> str:
        return f"{self.provider or '*'}:{self.model} from {self.effective_from:%Y-%m-%d}"


class UsageRecord(TenantModel):
    """One model call's tokens, latency and cost."""

    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+", db_index=False)

    run_id = models.UUIDField(null=True, blank=True)
    crew_id = models.UUIDField(null=True, blank=True)
    agent_id = models.UUIDField(null=True, blank=True)
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    input_tokens = models.PositiveIntegerField(default=0)  # includes cached
    cached_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)  # NULL: unknown
    price_source = models.CharField(max_length=80, blank=True)  # "genai-prices 0.2.3", "override:<id>", "scripted"
    latency_ms = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["org", "run_id"], name="usage_org_run"),
            # No (org, agent) or (org, crew) index: spend by crew or agent is read from DailySpend, and a partial day
            # from the date range's covering index, which includes both.
            # (org, created_at) is not declared here: on Postgres, migration 0002's covering index
            # (org, created_at) INCLUDE (...) serves it, and the costs page reads a date range from the index alone
            # (bench/history.py shows the plan); elsewhere (SQLite) migration 0005 keeps a plain one.
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.provider}:{self.model} {self.input_tokens}/{self.output_tokens}"


class DailySpend(models.Model):
    """The rollup of `UsageRecord` per UTC day, crew, agent, provider and model (see `apps.costs.rollup`).

    `record_usage` adds each call with one upsert in the usage row's transaction; the costs page,
    `GET /costs` and monthly budgets read whole days here. Crew and agent are `rollup.NO_ID` (the nil
    UUID) when the call had none, so the unique key has no NULLs. `cost_usd` is the known cost only;
    `unknown_calls` counts the calls it leaves out. Internal: never shown by id.

    A group's day is split into `rollup.STRIPES` rows by run (`stripe`), and readers sum them: every model call
    of a crew updates its day's row and holds its lock until the step commits, so with one row concurrent runs of
    a crew queued behind each other on it (bench/load.py: the most waited-for lock in a 500-decision storm).
    """

    id = models.BigAutoField(primary_key=True)
    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    crew_id = models.UUIDField()
    agent_id = models.UUIDField()
    provider = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    calls = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)  # includes cached
    cached_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=20, decimal_places=8, default=0)  # known cost only
    unknown_calls = models.PositiveIntegerField(default=0)
    runs = models.PositiveIntegerField(default=0)  # calls that were their run's first
    runs_agent = models.PositiveIntegerField(default=0)  # ... the run's first with this agent
    runs_model = models.PositiveIntegerField(default=0)  # ... with this model
    runs_provider = models.PositiveIntegerField(default=0)  # ... with this provider
    stripe = models.PositiveSmallIntegerField(default=0)  # rollup.stripe_of(the call's run)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "day", "crew_id", "agent_id", "provider", "model",
                                                       "stripe"], name="daily_spend_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.provider}:{self.model} {self.calls} calls"


class BudgetScope(models.TextChoices):
    ORG = "org", "Organisation (per month)"
    CREW = "crew", "Crew (per month)"
    AGENT = "agent", "Agent (per month)"
    RUN = "run", "Each run"


DEFAULT_THRESHOLDS = [50, 80, 100]


class Budget(TenantModel):
    """A spending limit: the whole org, one crew or one agent per calendar month (UTC), or each run.

    `target_id` is the crew's or agent's id (NULL for org and run scopes). Crossing a threshold
    (percent) emits a `BudgetAlert` once per period; at 100 % new runs are refused and running
    ones stop before their next model call.
    """

    scope = models.CharField(max_length=8, choices=BudgetScope.choices)
    target_id = models.UUIDField(null=True, blank=True)
    target_label = models.CharField(max_length=200, blank=True)
    amount_usd = models.DecimalField(max_digits=12, decimal_places=4)
    thresholds = models.JSONField(default=list)  # percents, e.g. [50, 80, 100]

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "scope", "target_id"], name="budget_org_scope_target"),
            models.UniqueConstraint(fields=["org", "scope"], condition=models.Q(target_id__isnull=True),
                                    name="budget_org_scope_untargeted"),
        ]
        ordering = ["scope", "target_label"]

    def __str__(self) -> str:
        return f"{self.get_scope_display()} {self.target_label} ${self.amount_usd}".replace("  ", " ")


class BudgetAlert(TenantModel):
    """A threshold a budget crossed in one period (the month's first day; a run's id for run budgets)."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period = models.CharField(max_length=40)  # "2025-06" or a run id
    threshold = models.PositiveSmallIntegerField()
    spent_usd = models.DecimalField(max_digits=14, decimal_places=8)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["budget", "period", "threshold"], name="budget_alert_once")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.budget} {self.threshold}% in {self.period}"
