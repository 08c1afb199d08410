"""The server catalog: every entry registers through the same service the form uses, and the
bundled order desk works as suggested, with nothing to install."""

from __future__ import annotations

import pytest

from apps.approvals.definition_changes import inbox
from apps.registry import selectors, services
from apps.registry.catalog import catalog, catalog_entry
from apps.registry.models import TrustTier
from apps.web.views.catalog import initial_data
from apps.web.views.servers import ServerForm


@pytest.mark.parametrize("key", [entry.key for entry in catalog()])
def test_every_entry_registers_through_the_form_and_the_service(actor, key):
    entry = catalog_entry(key)
    form = ServerForm(initial_data(entry))
    assert form.is_valid(), form.errors

    server = services.create_server(actor=actor, sync=False, **form.service_fields())

    assert (server.name, server.trust_tier, server.command) == (entry.key, entry.trust_tier, entry.command)
    assert server.args == list(entry.args)
    assert server.env_keys == sorted(entry.env)


def test_every_entry_explains_its_tier_and_what_to_install():
    for entry in catalog():
        assert entry.trust_tier in TrustTier.values
        assert entry.tier_reason and entry.install and entry.source and entry.summary, entry.key


def test_third_party_entries_need_nothing_fetched_at_start():
    """The sandbox has no network: uvx/npx could not download the package there."""
    for entry in catalog():
        if entry.trust_tier == TrustTier.THIRD_PARTY:
            assert entry.command not in ("uvx", "npx"), entry.key


def test_the_bundled_order_desk_syncs_as_suggested(actor):
    server = services.create_server(actor=actor, sync=False, **catalog_entry("orders").server_fields())

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    tools = {t.name: t.risk for t in selectors.tools_for_org(org_id=actor.org_id, server=server.id)}
    assert tools["get_order_status"] == "read" and tools["refund_order"] == "write"
    assert tools["delete_customer"] == "dangerous"


@pytest.mark.parametrize("tier", TrustTier.values)
def test_the_bundled_order_desk_works_under_every_tier(actor, tier):
    """Under third_party it runs in the sandbox, from its own work dir: no `apps` package to import there."""
    from apps.registry import pool

    fields = {**catalog_entry("orders").server_fields(), "trust_tier": tier}
    server = services.create_server(actor=actor, sync=False, **fields)

    report = services.sync_server(actor=actor, server_id=server.id, review=inbox)

    assert report.status == "ok", report.error
    result = pool.call_tool(server.id, "get_order_status", {"order_id": "A-1001"}, timeout=20)
    assert "shipped" in result.text


def test_an_entry_says_which_tier_it_cannot_start_under():
    fetched = [entry for entry in catalog() if entry.command in ("uvx", "npx")]
    assert fetched
    for entry in fetched:
        assert "no network" in entry.tier_caveat(TrustTier.THIRD_PARTY)
        assert entry.tier_caveat(TrustTier.OFFICIAL) == ""
    assert all(catalog_entry("orders").tier_caveat(t) == "" for t in TrustTier.values)
