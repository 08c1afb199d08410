"""Crews: agents working together, sequentially through tasks or under a supervisor, within limits."""

from __future__ import annotations

from django.db import models

from apps.core.models import TenantModel


class Process(models.TextChoices):
    SEQUENTIAL = "sequential", "Sequential: tasks in order"
    SUPERVISOR = "supervisor", "Supervisor: an agent routes between members"


class Crew(TenantModel):
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    process = models.CharField(max_length=12, choices=Process.choices, default=Process.SEQUENTIAL)
    supervisor = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, null=True, blank=True,
                                   related_name="supervised_crews")
    # [{"contains": "refund", "route": "<member name>"}]: tried in order before asking the supervisor model
    routing_rules = models.JSONField(default=list, blank=True)
    # [{"name": "order_id", "type": "string"/"integer"/"number"/"boolean", "required": true, "description": ""}]
    inputs = models.JSONField(default=list, blank=True)
    max_hops = models.PositiveIntegerField(default=6)
    max_tool_calls = models.PositiveIntegerField(default=50)
    timeout_s = models.PositiveIntegerField(default=900)
    token_budget = models.PositiveIntegerField(null=True, blank=True)
    budget_usd = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    # Held tool calls: how many different people must approve (M of N; any rejection rejects),
    # and how long a request waits before it expires with its default outcome (reject).
    approvals_required = models.PositiveSmallIntegerField(default=1)
    approval_ttl_hours = models.PositiveIntegerField(default=24)
    # Separation of duties: the person who started a run may not approve its held calls.
    separation_of_duties = models.BooleanField(default=False)
    # A call held because of what the run read (a tainted run, a destination the request never named, text
    # copied from a tool result): hold it for a person, or deny it outright. Per crew, beside the other
    # approval settings: the crew's owner knows whether anyone watches its inbox (an unattended nightly crew
    # is better denied than left waiting), and each crew's runs carry it in their snapshot.
    on_untrusted = models.CharField(max_length=8, choices=[("hold", "Hold for a person"), ("deny", "Deny")],
                                    default="hold")
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="crew_org_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class CrewTask(TenantModel):
    """One step of a sequential crew. `context` names the earlier tasks whose outputs it receives."""

    crew = models.ForeignKey(Crew, on_delete=models.CASCADE, related_name="tasks")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    description = models.TextField()
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="crew_tasks")
    context = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["crew", "name"], name="crew_task_name")]
        ordering = ["position"]

    def __str__(self) -> str:
        return self.name


class CrewMember(TenantModel):
    """A member agent a supervisor may route to."""

    crew = models.ForeignKey(Crew, on_delete=models.CASCADE, related_name="members")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="crew_memberships")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["crew", "agent"], name="crew_member_agent")]
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.crew_id} / {self.agent_id}"


class CrewVersion(TenantModel):
    crew = models.ForeignKey(Crew, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    changes = models.JSONField(default=dict)
    actor_label = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["crew", "number"], name="crew_version_number")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.crew_id} v{self.number}"
