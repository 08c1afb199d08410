"""Every existing organisation gets the built-in `human` server and its `human.ask` tool (new ones get
them when created: apps.accounts.services.create_organization)."""

from django.db import migrations
from django.utils import timezone


def add_human_ask(apps, schema_editor):
    from apps.registry.builtin import ASK, ASK_DESCRIPTION, ASK_SCHEMA, ASK_TOOL, HUMAN_SERVER
    from apps.registry.definitions import canonical_definition, definition_hash

    Organization = apps.get_model("accounts", "Organization")
    McpServer = apps.get_model("registry", "McpServer")
    Tool = apps.get_model("registry", "Tool")
    definition = canonical_definition(name=ASK, title="Ask a person", description=ASK_DESCRIPTION,
                                      input_schema=ASK_SCHEMA, output_schema=None, annotations=None)
    digest, now = definition_hash(definition), timezone.now()
    for org in Organization.objects.all():
        server, _ = McpServer.objects.get_or_create(
            org_id=org.id, name=HUMAN_SERVER,
            defaults={"transport": "builtin", "trust_tier": "internal", "status": "ok", "trusted_output": True,
                      "description": "Built into Airlock: questions to people."})
        Tool.objects.get_or_create(
            org_id=org.id, server=server, name=ASK,
            defaults={"qualified_name": ASK_TOOL, "title": "Ask a person", "description": ASK_DESCRIPTION,
                      "input_schema": ASK_SCHEMA, "risk": "read", "risk_source": "admin", "state": "active",
                      "definition": definition, "definition_hash": digest, "pinned_hash": digest,
                      "pinned_definition": definition, "pinned_at": now, "pinned_by": "built into Airlock",
                      "trusted_output": True, "last_seen_at": now})


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0004_server_elicitation_sampling_builtin"),
        ("accounts", "__first__"),
    ]

    operations = [migrations.RunPython(add_human_ask, migrations.RunPython.noop)]
