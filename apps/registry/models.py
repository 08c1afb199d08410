"""MCP servers an organisation registered, and the tools and resources they offer.

A tool is usable by an agent only when it is `active` and its current definition hash equals
the pinned hash (`Tool.is_usable`); a resource likewise (`Resource.is_usable`). Everything a server
says about itself (annotations, descriptions) is a claim: risk from annotations is used only for
trusted tiers.
"""

from __future__ import annotations

from django.db import models

from apps.core.fields import EncryptedJSONField
from apps.core.models import TenantModel


class Transport(models.TextChoices):
    STDIO = "stdio", "stdio (a local command)"
    HTTP = "http", "Streamable HTTP (a URL)"
    BUILTIN = "builtin", "Built into Airlock (human.ask)"


class TrustTier(models.TextChoices):
    OFFICIAL = "official", "Official"
    INTERNAL = "internal", "Internal"
    THIRD_PARTY = "third_party", "Third party"


TRUST_TIER_HELP = {
    TrustTier.OFFICIAL: "Published by the vendor of the system it reaches; its annotations set each tool's risk.",
    TrustTier.INTERNAL: "Written and run by your own team; its annotations set each tool's risk.",
    TrustTier.THIRD_PARTY: "Anyone else's code: sandboxed, annotations ignored, every tool waits for an admin's pin "
                           "and every write for a human.",
}


class ServerStatus(models.TextChoices):
    NEW = "new", "Not synced yet"
    SYNCING = "syncing", "Syncing"
    OK = "ok", "OK"
    ERROR = "error", "Error"
    NEEDS_AUTH = "needs_auth", "Needs authorization"
    DISABLED = "disabled", "Disabled"


class Risk(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    DANGEROUS = "dangerous", "Dangerous"


class RiskSource(models.TextChoices):
    ANNOTATIONS = "annotations", "From the server's annotations"
    ADMIN = "admin", "Set by an admin"
    DEFAULT = "default", "Default"


class ToolState(models.TextChoices):
    ACTIVE = "active", "Active"
    QUARANTINED = "quarantined", "Quarantined"
    DISABLED = "disabled", "Disabled"
    REMOVED = "removed", "Removed"


class Severity(models.TextChoices):
    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"


class McpServer(TenantModel):
    """A registered MCP server. `env` and `headers` are secrets: encrypted, never shown back."""

    name = models.CharField(max_length=64, help_text="Prefix of its tools' qualified names: name.tool")
    description = models.CharField(max_length=300, blank=True)
    transport = models.CharField(max_length=10, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = EncryptedJSONField(null=True, blank=True)
    cwd = models.CharField(max_length=500, blank=True)
    url = models.URLField(max_length=500, blank=True)
    headers = EncryptedJSONField(null=True, blank=True)
    # OAuth (apps/registry/oauth.py). `oauth`: what is not secret (expiry, resource, scope, the client
    # registration without its secret, the authorization server's metadata). `oauth_secrets`: the access and
    # refresh tokens and any client secret; like `headers`: encrypted, write-only, never in logs, events,
    # traces or exports (apps/audit/org_secrets.py redacts them).
    oauth = models.JSONField(null=True, blank=True)
    oauth_secrets = EncryptedJSONField(null=True, blank=True)
    trust_tier = models.CharField(max_length=20, choices=TrustTier.choices)
    enabled = models.BooleanField(default=True)
    timeout_s = models.PositiveIntegerField(default=30)
    # An admin vouches for what this server's tools return: their results do not taint a run by provenance
    # (a scanner finding still does). Audited (`server.trusted_output_changed`), shown on the server page.
    trusted_output = models.BooleanField(default=False)
    # The opposite vouching: an admin says these tools return text written outside the organisation (emails,
    # tickets, web pages) although the tier and hints say otherwise, so reading a result taints a run as a
    # third-party result does. Audited (`server.outside_content_changed`). A tool's own setting wins over this.
    outside_content = models.BooleanField(default=False)
    # What the server may ask of Airlock during a call (apps/registry/host.py). Elicitation puts its form in
    # the inbox (on by default for official and internal servers, off for third-party ones); sampling runs the
    # calling agent's model, counted to its run (off by default), and is held for a person when
    # `hold_sampling` is set.
    allow_elicitation = models.BooleanField(default=False)
    allow_sampling = models.BooleanField(default=False)
    hold_sampling = models.BooleanField(default=False)
    # What the last sync found
    status = models.CharField(max_length=10, choices=ServerStatus.choices, default=ServerStatus.NEW)
    protocol_version = models.CharField(max_length=20, blank=True)
    server_info = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True)
    resources = models.JSONField(default=list, blank=True)
    resource_templates = models.JSONField(default=list, blank=True)
    prompts = models.JSONField(default=list, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    sync_warnings = models.JSONField(default=list, blank=True)  # e.g. tools refused for their names
    # The poisoning scan of what it says besides its tools (instructions, prompts, resource descriptions)
    findings = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="mcp_server_org_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def env_keys(self) -> list[str]:
        return sorted((self.env or {}).keys())

    @property
    def uses_oauth(self) -> bool:
        return bool(self.oauth)

    @property
    def header_keys(self) -> list[str]:
        return sorted((self.headers or {}).keys())


class Tool(TenantModel):
    """One tool of a server, as last seen, with the definition an admin (or a trusted tier) pinned."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    qualified_name = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(null=True, blank=True)
    icons = models.JSONField(default=list, blank=True)
    risk = models.CharField(max_length=10, choices=Risk.choices, default=Risk.WRITE)
    risk_source = models.CharField(max_length=12, choices=RiskSource.choices, default=RiskSource.DEFAULT)
    state = models.CharField(max_length=12, choices=ToolState.choices, default=ToolState.QUARANTINED)
    state_reason = models.CharField(max_length=300, blank=True)
    definition = models.JSONField(default=dict)  # the canonical definition that definition_hash covers
    definition_hash = models.CharField(max_length=64)
    pinned_hash = models.CharField(max_length=64, blank=True)  # empty: never pinned
    pinned_definition = models.JSONField(null=True, blank=True)  # for the drift diff
    pinned_at = models.DateTimeField(null=True, blank=True)
    pinned_by = models.CharField(max_length=200, blank=True)
    findings = models.JSONField(default=list, blank=True)  # [{"code", "severity", "where", "message"}]
    trusted_output = models.BooleanField(default=False)  # as McpServer.trusted_output, for this tool only
    outside_content = models.BooleanField(default=False)  # as McpServer.outside_content, for this tool only
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "qualified_name"], name="tool_org_qualified_name"),
            models.UniqueConstraint(fields=["server", "name"], name="tool_server_name"),
        ]
        indexes = [models.Index(fields=["org", "state"], name="tool_org_state")]
        ordering = ["qualified_name"]

    def __str__(self) -> str:
        return self.qualified_name

    @property
    def is_pinned(self) -> bool:
        return bool(self.pinned_hash) and self.pinned_hash == self.definition_hash

    @property
    def has_drift(self) -> bool:
        return bool(self.pinned_hash) and self.pinned_hash != self.definition_hash

    @property
    def is_usable(self) -> bool:
        """What agents may see and call: active, and exactly the pinned definition."""
        return self.state == ToolState.ACTIVE and self.is_pinned

    @property
    def max_severity(self) -> str:
        order = [Severity.HIGH, Severity.MEDIUM, Severity.LOW]
        found = {f.get("severity") for f in self.findings or []}
        return next((s.value for s in order if s in found), "")


class Resource(TenantModel):
    """One resource a server lists (`resources/list`; templates are not rows), as last seen, with the definition
    an admin (or a trusted tier) pinned: what an agent may be given as read-only context.

    The definition (`definitions.canonical_resource`) is pinned; the content is not: a file may change between
    reads, and each read's content hash goes into the run's trace (`last_content_hash` is the latest).
    """

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="+")
    uri = models.CharField(max_length=1000)
    name = models.CharField(max_length=300, blank=True)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    mime_type = models.CharField(max_length=200, blank=True)
    size = models.BigIntegerField(null=True, blank=True)  # as the server listed it: a claim about the content
    annotations = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=12, choices=ToolState.choices, default=ToolState.QUARANTINED)
    state_reason = models.CharField(max_length=300, blank=True)
    definition = models.JSONField(default=dict)
    definition_hash = models.CharField(max_length=64)
    pinned_hash = models.CharField(max_length=64, blank=True)
    pinned_definition = models.JSONField(null=True, blank=True)
    pinned_at = models.DateTimeField(null=True, blank=True)
    pinned_by = models.CharField(max_length=200, blank=True)
    findings = models.JSONField(default=list, blank=True)
    trusted_output = models.BooleanField(default=False)  # its content does not taint a run (a finding still does)
    last_content_hash = models.CharField(max_length=64, blank=True)  # sha256 of the content a run last read
    last_read_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "uri"], name="resource_server_uri")]
        indexes = [models.Index(fields=["org", "state"], name="resource_org_state")]
        ordering = ["uri"]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        """How people and run traces name it: `server uri`."""
        return f"{self.server.name} {self.uri}"

    @property
    def is_pinned(self) -> bool:
        return bool(self.pinned_hash) and self.pinned_hash == self.definition_hash

    @property
    def has_drift(self) -> bool:
        return bool(self.pinned_hash) and self.pinned_hash != self.definition_hash

    @property
    def is_usable(self) -> bool:
        """What an agent may be given: active, exactly the pinned definition, on an enabled server."""
        return self.state == ToolState.ACTIVE and self.is_pinned and self.server.enabled

    @property
    def max_severity(self) -> str:
        order = [Severity.HIGH, Severity.MEDIUM, Severity.LOW]
        found = {f.get("severity") for f in self.findings or []}
        return next((s.value for s in order if s in found), "")
