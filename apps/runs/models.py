"""Runs of a crew, their steps, the tool-call ledger and the append-only event log.

- `Run`: status, inputs/output, the snapshot of everything it ran with, the engine's cursor
  (`state`), the worker lease, totals. A claim is a conditional UPDATE on status + lease.
- `RunStep`: an agent turn (kind `agent`, holding the persisted pydantic-ai message history of
  that conversation) or a model call inside one (kind `llm`: provider, model, tokens, cost,
  latency). Steps form a tree through `parent`.
- `ToolCall`: the ledger (ARCHITECTURE section 4), one row per call the model asked for,
  keyed by (run, step, call_id). States in `CallState`; `dispatched` is committed before the
  request leaves, and a `dispatched` row found on resume becomes `unknown`.
- `RunEvent`: append-only, per-run `seq`; the page and the API replay from it.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Q, When
from django.utils import timezone

from apps.core.models import TenantModel


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING = "waiting", "Waiting for a person"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    LIMIT_EXCEEDED = "limit_exceeded", "Limit exceeded"


FINISHED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT,
                      RunStatus.LIMIT_EXCEEDED})


class ErrorClass(models.TextChoices):
    TRANSIENT = "transient", "Transient"
    VALIDATION = "validation", "Validation"
    BUSINESS = "business", "Business"
    PERMISSION = "permission", "Permission"
    LIMIT = "limit", "Limit"
    INTERNAL = "internal", "Internal"


class RunOrigin(models.TextChoices):
    CREW = "", "Started"
    RERUN = "rerun", "Re-run"
    FORK = "fork", "Fork"
    TRIAL = "trial", "Agent tried on its own"


class Run(TenantModel):
    # No index on `org` alone, here and on RunStep, UsageRecord and AuditEvent: the table's other indexes lead with
    # it and serve every lookup by organisation; one of its own would only be written, at each of a run's steps.
    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+", db_index=False)
    crew = models.ForeignKey("crews.Crew", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    crew_name = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    inputs = models.JSONField(default=dict, blank=True)
    output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=12, choices=ErrorClass.choices, blank=True)
    # crew, agents (with prompts and grants), tool definitions and the versions used
    snapshot = models.JSONField(default=dict)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    started_by_label = models.CharField(max_length=200, blank=True)
    idempotency_key = models.CharField(max_length=200, blank=True)
    # The worker lease: a claim sets both; a live lease means someone is working on it.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    deliveries = models.PositiveIntegerField(default=0)  # claims after a lost worker (capped)
    state = models.JSONField(default=dict, blank=True)  # the engine's cursor
    hops = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    tokens_cached = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True, default=0)
    cost_unknown_calls = models.PositiveIntegerField(default=0)  # model calls with no known price
    # The cost and input tokens once the run has ended (NULL before), kept by the database from the counters above:
    # what the list's cost and token sorts and the costs page order by. The counters change at every model call;
    # while an index named them, each step's update of the run added an entry to every one of its indexes, where
    # these change once, when the run ends.
    final_cost_usd = models.GeneratedField(
        expression=Case(When(status__in=sorted(FINISHED), then=F("cost_usd")), default=None),
        output_field=models.DecimalField(max_digits=14, decimal_places=8, null=True), db_persist=True)
    final_tokens_in = models.GeneratedField(
        expression=Case(When(status__in=sorted(FINISHED), then=F("tokens_in")), default=None),
        output_field=models.PositiveIntegerField(null=True), db_persist=True)
    cancel_requested = models.BooleanField(default=False)
    tainted = models.BooleanField(default=False)  # read untrusted content: every write needs a person
    # The run's writes that did not go through (apps/runs/outcome.py), set when it finishes: what the system
    # did, beside what its agents said. [{"tool_call_id", "tool", "state", "reason"}]
    attention = models.JSONField(default=list, blank=True)
    last_seq = models.PositiveIntegerField(default=0)  # of its events
    # W3C traceparent of the run's root span when tracing is on (apps/core/tracing.py): every later task
    # and decision for the run joins that trace.
    trace_parent = models.CharField(max_length=64, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # How the run came to be (apps/runs/replay.py, apps/runs/trial.py): "" started from a crew; "rerun" the
    # parent's inputs on today's config; "fork" the parent's config from one of its turns on, with an edit;
    # "trial" one agent tried on its own, with no crew (the snapshot holds a one-task crew made for it).
    origin = models.CharField(max_length=8, choices=RunOrigin.choices, blank=True, default="")
    parent = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children")
    parent_step = models.PositiveIntegerField(null=True, blank=True)  # a fork: the parent's step position

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "idempotency_key"], condition=~Q(idempotency_key=""),
                                               name="run_org_idempotency_key")]
        indexes = [
            models.Index(fields=["org", "-created_at"], name="run_org_created"),
            models.Index(fields=["org", "status", "-created_at"], include=["final_cost_usd"], name="run_org_status"),
            models.Index(fields=["org", "crew", "-created_at"], name="run_org_crew"),
            models.Index(fields=["status", "lease_expires_at"], name="run_lease"),
            # run history (apps/runs/history.py): who started it; Postgres-only search and held/findings/agent
            # indexes are in migration 0003
            models.Index(fields=["org", "started_by", "-created_at"], name="run_org_started_by"),
            # The list's cost and token sorts have Postgres-only indexes in exactly history.SORTS' order (migrations
            # 0014 and 0018: SQLite refuses NULLS LAST in an index).
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.crew_name} run {self.id}"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def attention_summary(self) -> str:
        """e.g. "1 write failed, 1 rejected": the run's `attention`, in a few words ("" when there is none)."""
        from apps.runs.outcome import summary  # outcome imports these models: a top-level import is a cycle

        return summary(self.attention or [])


class StepKind(models.TextChoices):
    AGENT = "agent", "Agent turn"
    LLM = "llm", "Model call"


class RunStep(TenantModel):
    # db_index=False here, on ToolCall.run and on RunEvent.run: each table's unique key leads with `run`, which
    # serves every lookup by run; an index on `run` alone would only be written, on the engine's every step. No
    # lookup is by organisation alone: steps are read by run.
    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+", db_index=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")
    position = models.PositiveIntegerField()  # order within the run
    kind = models.CharField(max_length=8, choices=StepKind.choices)
    agent_id = models.UUIDField(null=True, blank=True)
    agent_name = models.CharField(max_length=100, blank=True)
    task = models.CharField(max_length=100, blank=True)  # task name (sequential) or "routing" (supervisor)
    status = models.CharField(max_length=16, blank=True)  # agent: running/done/partial/blocked/stopped
    status_reason = models.TextField(blank=True)
    output = models.TextField(blank=True)  # agent: final answer; llm: the text it said
    # llm only
    provider = models.CharField(max_length=40, blank=True)
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    price_source = models.CharField(max_length=80, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="run_step_position")]
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.position} {self.kind}"


class RunMessage(models.Model):
    """One message of an agent turn's conversation (a pydantic-ai message, ModelMessagesTypeAdapter's JSON),
    at `seq` in the turn. Rows are appended as the conversation grows, so a step writes only what it adds;
    only apps/runs/messages.py writes them (the run store through it, and retention)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No org and no run: a conversation is only reached through its turn, read for its org. The unique key leads
    # with `turn`, which serves every read and the foreign key's checks when steps are deleted (a second,
    # unindexed key to the run would make every deleted run scan this table).
    turn = models.ForeignKey(RunStep, on_delete=models.CASCADE, related_name="conversation", db_index=False)
    seq = models.PositiveIntegerField()
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["turn", "seq"], name="run_message_seq")]

    def __str__(self) -> str:
        return f"{self.turn_id} #{self.seq}"


class CallState(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    DENIED = "denied", "Denied"
    HELD = "held", "Held for a person"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    DISPATCHED = "dispatched", "Dispatched"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    UNKNOWN = "unknown", "Unknown (crashed in flight)"


# States after which the model gets an answer for the call.
ANSWERED = frozenset({CallState.DENIED, CallState.REJECTED, CallState.EXPIRED, CallState.SUCCEEDED,
                      CallState.FAILED})


class ToolCall(TenantModel):
    # No index of its own: `tool_call_org_recent` leads with the org. The ledger is the largest table a run
    # writes to: no index names a column a call's life changes (`state`, `finished_at`, `result`), so its
    # completion is updated in place (a HOT update) instead of adding an entry to each index again.
    org = models.ForeignKey("accounts.Organization", on_delete=models.CASCADE, related_name="+", db_index=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="ledger", db_index=False)
    step = models.ForeignKey(RunStep, on_delete=models.CASCADE, related_name="tool_calls")  # the llm step
    call_id = models.CharField(max_length=200)  # the model's tool_call_id
    position = models.PositiveSmallIntegerField(default=0)  # order within the model's response
    tool = models.ForeignKey("registry.Tool", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    qualified_name = models.CharField(max_length=200)  # what the model asked for (mapped back), e.g. orders.refund
    model_tool_name = models.CharField(max_length=200)  # the name the model used (e.g. orders__refund)
    arguments = models.JSONField(default=dict, blank=True)  # as proposed by the model
    args_hash = models.CharField(max_length=64)  # sha256 of canonical JSON of `arguments`
    approved_arguments = models.JSONField(null=True, blank=True)  # what is executed after a person's approval
    definition_hash = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=12, choices=CallState.choices, default=CallState.PROPOSED)
    decision = models.CharField(max_length=8, blank=True)  # allow / hold / deny (policy)
    rule = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)  # the policy's reason, or the reviewer's comment
    # Indexed only where set (`tool_call_approval`): most calls are never held, and an entry for each NULL would
    # only be written.
    approval = models.ForeignKey("approvals.ApprovalRequest", on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="+", db_index=False)
    result = models.JSONField(null=True, blank=True)  # size-capped: {"is_error", "text", "structured", "truncated"}
    error = models.TextField(blank=True)
    error_class = models.CharField(max_length=12, blank=True)
    findings = models.JSONField(default=list, blank=True)
    idempotency_key = models.CharField(max_length=80)
    attempts = models.PositiveSmallIntegerField(default=0)
    decided_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=200, blank=True)  # a person who resolved an `unknown`
    # Whether nobody knows if the call happened (`state` is `unknown`), kept by the database from `state`: the
    # inbox's index of such calls names this column, whose value a call's usual life (proposed, dispatched,
    # succeeded) never changes, where an index naming `state` would make every transition a new index entry.
    outcome_unknown = models.GeneratedField(expression=Q(state=CallState.UNKNOWN), output_field=models.BooleanField(),
                                            db_persist=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step", "call_id"], name="tool_call_ledger_key")]
        indexes = [models.Index(fields=["run", "qualified_name", "args_hash"], name="tool_call_fingerprint"),
                   models.Index(fields=["org", "-created_at"], name="tool_call_org_recent"),
                   models.Index(fields=["approval"], condition=Q(approval__isnull=False), name="tool_call_approval"),
                   models.Index(fields=["org", "created_at"], condition=Q(outcome_unknown=True),
                                name="tool_call_org_unknown")]
        ordering = ["step__position", "position"]

    def __str__(self) -> str:
        return f"{self.qualified_name} [{self.state}]"

    @property
    def effective_arguments(self) -> dict:
        return self.approved_arguments if self.approved_arguments is not None else self.arguments


class RunEvent(models.Model):
    """Append-only: one row per thing that happened, in order (`seq` per run, from 1)."""

    # The run and its sequence number are the key: a surrogate id would be one more column and index written
    # with each of a run's ~5 events a step, read by nothing.
    pk = models.CompositePrimaryKey("run", "seq")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.seq} {self.type}"


class RunRetention(TenantModel):
    """How long an organisation keeps the detail of finished runs: their events (the timeline and live
    feed), the agents' conversations and the tool calls' arguments and results. The run itself, its
    ledger rows (what was called, decided and when), costs and the audit log are kept: history and
    spend stay true, and the audit chain stays verifiable (its rows are never deleted)."""

    days = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org"], name="run_retention_one_per_org")]
