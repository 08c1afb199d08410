"""Resources and prompts through the API: what the last sync found, each with its scan findings, only for the
organisation's own servers; and the bundled demo server's answer to an unknown prompt."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INVALID_PARAMS

from apps.approvals.definition_changes import inbox
from apps.registry import services
from tests.factories import make_org, token_for
from tests.registry.conftest import ROOT, register_python


def _get(client, token, path):
    return client.get(f"/api/v1{path}", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def synced(actor):
    server = register_python(actor, "notes", "with_prompts.py")
    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)
    assert report.status == "ok", report.error
    return server


def test_resources_and_prompts_are_listed_with_their_findings(client, org, synced):
    token = token_for(org, "viewer")
    resources = {r["name"]: r for r in _get(client, token, f"/servers/{synced.id}/resources").json()}
    assert set(resources) == {"handbook", "secrets", "day"}
    assert resources["handbook"]["uri"] == "notes://handbook" and resources["handbook"]["findings"] == []
    assert resources["day"]["uri_template"] == "notes://day/{day}"
    assert resources["secrets"]["findings"] and all(f["where"].startswith("resource secrets ")
                                                    for f in resources["secrets"]["findings"])

    prompts = {p["name"]: p for p in _get(client, token, f"/servers/{synced.id}/prompts").json()}
    assert prompts["summarise"]["description"] == "Summarise a document for a busy reader."
    assert prompts["summarise"]["arguments"] == [{"name": "document", "description": "", "required": True}]
    assert prompts["summarise"]["findings"] == [] and prompts["helper"]["findings"]


def test_another_organisations_server_is_not_found(client, synced):
    other = token_for(make_org("Other"), "admin")
    for path in ("resources", "prompts"):
        assert _get(client, other, f"/servers/{synced.id}/{path}").status_code == 404


def test_the_demo_server_answers_an_unknown_prompt_with_invalid_params(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=[str(ROOT / "apps" / "demo" / "order_desk.py"),
                                                                 "stdio"],
                                   env={"ORDER_DESK_DATA": str(tmp_path / "orders.json")})

    async def ask() -> MCPError:
        async with Client(params) as client:
            with pytest.raises(MCPError) as caught:
                await client.get_prompt("no-such-prompt")
            return caught.value

    # Its own thread: after the browser tests, Playwright's sync API leaves its loop marked running in
    # the main thread for the rest of the session, and anyio.run refuses to start a second one there.
    with ThreadPoolExecutor(max_workers=1) as thread:
        error = thread.submit(anyio.run, ask).result()
    assert error.code == INVALID_PARAMS
    assert "no-such-prompt" in error.message
