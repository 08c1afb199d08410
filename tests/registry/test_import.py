"""Importing the MCP configs people already have: each format's sample file previews and registers what it says,
secrets stay masked, conflicts get a free name, and a failing entry leaves nothing behind and stops no other."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.approvals.definition_changes import inbox
from apps.audit.models import AuditEvent
from apps.registry import imports, selectors, services
from apps.registry.models import McpServer
from tests.factories import add_member, token_for
from tests.registry.conftest import ROOT, register

SAMPLES = Path(__file__).parent / "import_samples"


def _sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def _api_import(client, token, config: str, **body):
    return client.post("/api/v1/servers/import", data=json.dumps({"config": config, **body}),
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def admin_token(org):
    return token_for(org, "admin")


def _registered(org):
    return McpServer.objects.filter(org=org).exclude(transport="builtin")


def _stored(org, name):
    return McpServer.objects.get(org=org, name=name)


def test_claude_desktop_config_round_trips(client, org, admin_token):
    text = _sample("claude_desktop_config.json")
    preview = _api_import(client, admin_token, text)
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert body["format"] == "mcpServers" and body["results"] == []
    entries = {e["name"]: e for e in body["entries"]}
    assert set(entries) == {"filesystem", "github", "order-tracker"}
    assert entries["github"]["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "•••"}
    assert "ghp_sample" not in preview.content.decode()
    assert (entries["filesystem"]["trust_tier"], entries["order-tracker"]["trust_tier"]) == ("third_party", "internal")
    assert not _registered(org).exists()  # a dry run writes nothing

    done = _api_import(client, admin_token, text, dry_run=False).json()
    assert [r["ok"] for r in done["results"]] == [True, True, True], done["results"]
    source = json.loads(text)["mcpServers"]
    for key, name in (("filesystem", "filesystem"), ("github", "github"), ("Order Tracker", "order-tracker")):
        server = _stored(org, name)
        assert (server.transport, server.command, server.args) == ("stdio", source[key]["command"], source[key]["args"])
        assert (server.env or {}) == source[key].get("env", {})  # secrets kept (encrypted), as given
    assert "ghp_sample" not in done.__repr__() and "ghp_sample" not in json.dumps(
        list(AuditEvent.objects.filter(org=org).values_list("data", flat=True)))


def test_claude_code_mcp_json_round_trips_and_refuses_sse_alone(client, org, admin_token):
    text = _sample("claude_code.mcp.json")
    entries = {e["name"]: e for e in _api_import(client, admin_token, text).json()["entries"]}
    assert entries["sentry"]["transport"] == "http" and entries["sentry"]["headers"] == {"Authorization": "•••"}
    assert entries["reports"]["trust_tier"] == "internal"  # python3 ./tools/reports_mcp.py: a local script
    assert entries["time"]["trust_tier"] == "third_party"  # uvx fetches a published package
    assert "SSE" in entries["legacy-events"]["problem"]

    results = {r["name"]: r for r in _api_import(client, admin_token, text, dry_run=False).json()["results"]}
    assert {n for n, r in results.items() if r["ok"]} == {"sentry", "time", "reports"}
    assert "SSE" in results["legacy-events"]["error"]
    sentry = _stored(org, "sentry")
    assert (sentry.url, sentry.headers) == ("https://mcp.sentry.dev/mcp",
                                            {"Authorization": "Bearer sntrys_sample_token_1111"})
    assert _stored(org, "time").args == ["mcp-server-time", "--local-timezone", "Europe/Paris"]
    assert not McpServer.objects.filter(org=org, name="legacy-events").exists()


def test_vscode_mcp_json_round_trips_with_inputs_left_to_fill_in(client, org, admin_token):
    text = _sample("vscode.mcp.json")
    body = _api_import(client, admin_token, text).json()
    assert body["format"] == "vscode"
    entries = {e["name"]: e for e in body["entries"]}
    assert any("Perplexity API Key" in n for n in entries["perplexity"]["notes"])
    assert any("DOCS_API_KEY" in n for n in entries["docs"]["notes"])

    done = _api_import(client, admin_token, text, dry_run=False,
                       env={"perplexity": {"PERPLEXITY_API_KEY": "pplx-filled-in"}}).json()
    assert all(r["ok"] for r in done["results"]), done["results"]
    assert _stored(org, "perplexity").env == {"PERPLEXITY_API_KEY": "pplx-filled-in"}
    assert _stored(org, "fetch").args == ["mcp-server-fetch"] and _stored(org, "fetch").trust_tier == "third_party"
    assert _stored(org, "docs").headers == {"X-Api-Key": ""}  # the ${env:...} is not Airlock's to read


def test_registry_published_examples_round_trip(client, org, admin_token):
    package = _api_import(client, admin_token, _sample("registry_with_package.server.json")).json()
    assert package["format"] == "server.json"
    [entry] = package["entries"]
    assert (entry["name"], entry["command"], entry["trust_tier"]) == ("local-weather", "npx", "third_party")
    assert entry["args"] == ["-y", "@modelcontextprotocol/server-weather@1.0.0", "<config_path>", "--port", "8080"]
    assert entry["env"] == {"API_KEY": "•••"} and any("API_KEY" in n for n in entry["notes"])

    remote = _api_import(client, admin_token, _sample("registry_with_remote.server.json"), dry_run=False).json()
    assert remote["results"][0]["ok"], remote["results"]
    server = _stored(org, "remote-weather")
    assert (server.transport, server.url, server.trust_tier) == ("http", "https://api.example.com/mcp", "third_party")
    assert server.description == "Remote MCP server reachable over streamable HTTP."
    assert server.header_keys == ["Authorization"]


def test_registry_pypi_and_oci_packages_get_their_runtimes_and_distinct_names(actor):
    _, entries = imports.preview(org_id=actor.org_id, text=_sample("registry_pypi_oci.server.json"))
    pypi, oci = entries
    assert (pypi.command, pypi.args, pypi.name) == ("uvx", ["acme-ticket-desk-mcp==0.4.2"], "ticket-desk")
    assert pypi.env == {"TICKETS_URL": "https://tickets.acme.example", "TICKETS_TOKEN": ""}
    assert (oci.command, oci.args) == ("docker", ["run", "-i", "--rm", "ghcr.io/acme/ticket-desk-mcp:0.4.2"])
    assert oci.conflict and oci.suggested_name == "ticket-desk-2"


def test_a_taken_name_is_offered_a_free_one_and_renames_are_honoured(client, org, actor, admin_token):
    register(actor, name="github", command="/bin/true")
    text = _sample("claude_desktop_config.json")
    entries = {e["name"]: e for e in _api_import(client, admin_token, text).json()["entries"]}
    assert entries["github"]["conflict"] and entries["github"]["suggested_name"] == "github-2"

    done = _api_import(client, admin_token, text, dry_run=False, select=["github", "filesystem"],
                       rename={"filesystem": "files"}).json()
    assert {r["name"] for r in done["results"] if r["ok"]} == {"github-2", "files"}
    assert _stored(org, "github").command == "/bin/true"  # the existing one untouched
    assert not McpServer.objects.filter(org=org, name="order-tracker").exists()  # not selected


def test_a_failing_entry_leaves_nothing_and_the_others_register(client, org, admin_token, settings):
    settings.AIRLOCK_EGRESS_ALLOW_PRIVATE = False  # as in production: the guard refuses internal addresses
    config = json.dumps({"mcpServers": {
        "metadata": {"type": "http", "url": "http://169.254.169.254/latest/meta-data/"},
        "bad-env": {"command": "npx", "args": ["x"], "env": {"NOT VALID": "1"}},
        "ok": {"command": "npx", "args": ["-y", "some-server"]},
    }})
    results = {r["name"]: r for r in _api_import(client, admin_token, config, dry_run=False).json()["results"]}
    assert "url" in results["metadata"]["errors"] and "env" in results["bad-env"]["errors"]
    assert results["ok"]["ok"]
    assert list(_registered(org).values_list("name", flat=True)) == ["ok"]
    assert AuditEvent.objects.filter(org=org, action="server.created").count() == 1


def test_bad_input_and_roles(client, org):
    viewer = token_for(org, "viewer")
    assert _api_import(client, viewer, _sample("vscode.mcp.json")).status_code == 403
    admin = token_for(org, "admin")
    not_json = _api_import(client, admin, "{nope")
    assert not_json.status_code == 422 and "config" in not_json.content.decode()
    unknown = _api_import(client, admin, json.dumps({"tools": []}))
    assert unknown.status_code == 422 and "mcpServers" in unknown.content.decode()


def test_an_imported_local_server_syncs_its_tools(client, org, actor, admin_token, tmp_path):
    """The import registers through the same service as the form: the bundled order desk, given as a Claude
    Desktop entry, syncs its four tools."""
    config = json.dumps({"mcpServers": {"orders": {
        "command": sys.executable, "args": [str(ROOT / "apps" / "demo" / "order_desk.py"), "stdio"],
        "env": {"ORDER_DESK_DATA": str(tmp_path / "orders.json")}}}})
    [result] = _api_import(client, admin_token, config, dry_run=False, trust_tier={"orders": "internal"}).json()[
        "results"]
    report = services.sync_server(actor=actor, server_id=result["server_id"], review=inbox)
    assert report.status == "ok", report.error
    assert report.tools_added == 4
    assert selectors.get_server(org_id=org.id, server_id=result["server_id"]).trust_tier == "internal"


def test_the_web_page_reports_each_failure_and_keeps_the_rest(client, org, admin, settings):
    settings.AIRLOCK_EGRESS_ALLOW_PRIVATE = False
    client.force_login(admin.user)
    assert client.post("/servers/import/", {"config": "{nope"}).status_code == 422
    config = json.dumps({"mcpServers": {"metadata": {"type": "http", "url": "http://169.254.169.254/"},
                                        "ok": {"command": "npx", "args": ["-y", "some-server"]}}})
    preview = client.post("/servers/import/", {"config": config})
    page = preview.content.decode()
    assert preview.status_code == 200 and 'name="sealed"' in page and "169.254.169.254/" in page
    sealed = page.split('name="sealed" value="')[1].split('"')[0]
    done = client.post("/servers/import/", {"action": "confirm", "sealed": sealed, "select": ["metadata", "ok"],
                                            "rename-ok": "ok", "tier-ok": "third_party"})
    text = done.content.decode()
    assert done.status_code == 200 and "ok: registered" in text and "metadata: " in text
    assert list(_registered(org).values_list("name", flat=True)) == ["ok"]
    assert client.post("/servers/import/", {"action": "confirm", "sealed": "forged", "select": ["ok"]}
                       ).status_code == 422


def test_builders_cannot_open_the_import_page(client, org):
    builder = add_member(org, "builder")
    client.force_login(builder.user)
    assert client.get("/servers/import/").status_code == 403


def test_the_registry_api_wrapping_and_vscode_settings_nesting_are_read(actor):
    wrapped = json.dumps({"server": json.loads(_sample("registry_with_remote.server.json")),
                          "_meta": {"io.modelcontextprotocol.registry/official": {"status": "active"}}})
    kind, [entry] = imports.preview(org_id=actor.org_id, text=wrapped)
    assert (kind, entry.url) == ("server.json", "https://api.example.com/mcp")
    settings_json = json.dumps({"editor.fontSize": 13, "mcp": json.loads(_sample("vscode.mcp.json"))})
    kind, entries = imports.preview(org_id=actor.org_id, text=settings_json)
    assert kind == "vscode" and [e.name for e in entries] == ["perplexity", "fetch", "docs"]


def test_an_uploaded_file_previews_like_a_paste(client, admin):
    client.force_login(admin.user)
    upload = SimpleUploadedFile("claude_desktop_config.json", _sample("claude_desktop_config.json").encode(),
                                content_type="application/json")
    page = client.post("/servers/import/", {"file": upload}).content.decode()
    assert "order-tracker" in page and "GITHUB_PERSONAL_ACCESS_TOKEN=•••" in page
    assert "ghp_sample" not in page
