"""The approval inbox: requests for a person's decision, and each person's vote.

A tool-call request binds to the hash of the arguments it was shown with and to the tool's
definition hash; a decision with edited arguments records them (and their hash) in
`approved_arguments`. `run_id` / `tool_call_id` are UUIDs: runs sits above approvals.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.core.models import TenantModel


class ApprovalKind(models.TextChoices):
    TOOL_CALL = "tool_call", "Tool call"
    DEFINITION_CHANGE = "definition_change", "Tool definition change"
    QUESTION = "question", "An agent's question (human.ask)"
    ELICITATION = "elicitation", "A server asks for input"
    SAMPLING = "sampling", "A server asks to run the model"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    EXPIRED = "expired", "Expired"
    ANSWERED = "answered", "Answered by a person"  # not run: the person's text is the call's result


class VoteDecision(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    RESPOND = "respond", "Answer instead"  # the comment goes back to the agent as the call's result


class ApprovalRequest(TenantModel):
    kind = models.CharField(max_length=20, choices=ApprovalKind.choices, default=ApprovalKind.TOOL_CALL)
    status = models.CharField(max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    run_id = models.UUIDField(null=True, blank=True)
    tool_call_id = models.UUIDField(null=True, blank=True)
    agent = models.ForeignKey("agents.Agent", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    tool = models.ForeignKey("registry.Tool", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    title = models.CharField(max_length=300, blank=True)  # e.g. "orders.refund_order by Refunds"
    arguments = models.JSONField(default=dict, blank=True)  # as proposed
    approved_arguments = models.JSONField(null=True, blank=True)  # as approved (edited or not)
    args_hash = models.CharField(max_length=64, blank=True)  # of `arguments`
    approved_args_hash = models.CharField(max_length=64, blank=True)
    definition_hash = models.CharField(max_length=64, blank=True)
    risk = models.CharField(max_length=10, blank=True)
    reason = models.CharField(max_length=500, blank=True)  # the policy's reason for holding
    rule = models.CharField(max_length=40, blank=True)
    context = models.JSONField(default=dict, blank=True)  # task, agent, findings, diff ... for the reviewer
    required_approvals = models.PositiveSmallIntegerField(default=1)
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    decided_by_label = models.CharField(max_length=200, blank=True)
    comment = models.TextField(blank=True)
    # A question's or an elicitation's answer, as the person gave it: {"text"} or {"action", "content"}.
    answer = models.JSONField(null=True, blank=True)
    requested_by_user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                          blank=True, related_name="+")  # who started the run
    # The crew's separation of duties, as the run's snapshot had it: the starter may not approve.
    separation_of_duties = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["org", "status", "-created_at"], name="approval_org_status"),
            models.Index(fields=["run_id"], name="approval_run"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry"),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title or f"{self.kind} {self.id}"

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING


class ApprovalVote(TenantModel):
    """One person's decision on a request (M of N: each person once; any rejection rejects)."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="votes")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+")
    actor_label = models.CharField(max_length=200)
    decision = models.CharField(max_length=10, choices=VoteDecision.choices)
    comment = models.TextField(blank=True)
    arguments = models.JSONField(null=True, blank=True)  # edited arguments, when the voter changed them

    class Meta:
        constraints = [models.UniqueConstraint(fields=["request", "user"], name="approval_vote_once")]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.actor_label}: {self.decision}"


class StandingScope(models.TextChoices):
    RUN = "run", "The rest of this run"
    AGENT_TOOL = "agent_tool", "This agent and tool, when the arguments match, for a while"


class StandingApproval(TenantModel):
    """A person's decision that covers later calls too (never for `dangerous` tools).

    `run`: the same agent and tool for the rest of one run. `agent_tool`: the agent and tool,
    when `condition` (the safe condition language; empty: any arguments) is true, until
    `expires_at`. Lifts only the grant's own holds (apps.agents.policy): never the dangerous,
    third-party-write or tainted-run rules.
    """

    scope = models.CharField(max_length=12, choices=StandingScope.choices)
    run_id = models.UUIDField(null=True, blank=True)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    tool = models.ForeignKey("registry.Tool", on_delete=models.CASCADE, related_name="+")
    condition = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    source = models.ForeignKey(ApprovalRequest, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_by_label = models.CharField(max_length=200)
    hits = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_label = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "agent", "tool"], name="standing_agent_tool")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_scope_display()}: {self.tool_id}"


class StandingApprovalHit(TenantModel):
    """One call a standing approval allowed without asking (which approval, which run and call)."""

    standing = models.ForeignKey(StandingApproval, on_delete=models.CASCADE, related_name="hit_rows")
    run_id = models.UUIDField(null=True, blank=True)
    tool_call_id = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["standing", "tool_call_id"], name="standing_hit_once")]
        ordering = ["-created_at"]
