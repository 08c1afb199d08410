"""LLM connections, agents, their tool grants, their context resources and their version history."""

from __future__ import annotations

from django.db import models

from apps.core.fields import EncryptedJSONField
from apps.core.models import TenantModel


class Provider(models.TextChoices):
    SCRIPTED = "scripted", "Scripted (built in, deterministic)"
    OPENAI = "openai", "OpenAI"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible (Ollama, vLLM, LM Studio, ...)"
    ANTHROPIC = "anthropic", "Anthropic"


class GrantPolicy(models.TextChoices):
    AUTO = "auto", "Auto: runs without asking"
    APPROVE = "approve", "Approve: a person decides each call"
    DENY = "deny", "Deny: never"


class LlmConnection(TenantModel):
    """Where an agent's model lives. `api_key` is a secret: encrypted, write-only."""

    name = models.CharField(max_length=100)
    provider = models.CharField(max_length=20, choices=Provider.choices)
    base_url = models.CharField(max_length=500, blank=True)
    api_key = EncryptedJSONField(null=True, blank=True)  # a string, encrypted at rest
    default_model = models.CharField(max_length=200, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_check_ok = models.BooleanField(null=True)
    last_check_message = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="llm_connection_org_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key)


class Agent(TenantModel):
    """An agent: a model, a scope, and an allowlist of tools (its grants)."""

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=300, blank=True)
    instructions = models.TextField(blank=True)
    in_scope = models.TextField(blank=True)
    out_of_scope = models.TextField(blank=True)
    connection = models.ForeignKey(LlmConnection, on_delete=models.PROTECT, related_name="agents")
    model = models.CharField(max_length=200, blank=True)
    temperature = models.FloatField(null=True, blank=True)
    max_steps = models.PositiveIntegerField(default=8)
    script = models.JSONField(null=True, blank=True)  # scripted provider only
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="agent_org_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ToolGrant(TenantModel):
    """One tool an agent may call, and how: auto, approve or deny, plus an optional escalating condition."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grants")
    tool = models.ForeignKey("registry.Tool", on_delete=models.CASCADE, related_name="grants")
    policy = models.CharField(max_length=10, choices=GrantPolicy.choices)
    condition = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "tool"], name="tool_grant_agent_tool")]

    def __str__(self) -> str:
        return f"{self.agent_id} -> {self.tool_id}: {self.policy}"


class ContextResource(TenantModel):
    """A resource an agent is given as read-only context: read at the start of each of its tasks, capped, scanned
    and put before the task as untrusted data (apps/runs/engine/context.py)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="context_resources")
    resource = models.ForeignKey("registry.Resource", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "resource"], name="context_resource_agent_resource")]

    def __str__(self) -> str:
        return f"{self.agent_id} <- {self.resource_id}"


class AgentVersion(TenantModel):
    """What an agent looked like after one save: a full snapshot and what changed since the last one."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    changes = models.JSONField(default=dict)  # {field: [before, after]}; {} for the first version
    actor_label = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="agent_version_number")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.number}"
