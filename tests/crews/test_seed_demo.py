"""seed_demo's agents and crews on the bundled order desk (a real stdio MCP server synced once)."""

from __future__ import annotations

from apps.accounts.models import Organization
from apps.agents import selectors as agents
from apps.agents.models import AgentVersion
from apps.crews import selectors as crews


def test_seed_demo_adds_the_demo_agents_and_crews_once(db, settings, tmp_path):
    from apps.demo.services import seed_demo

    settings.VAR_DIR = tmp_path
    seed_demo()
    org_id = Organization.objects.get(slug="demo").id
    by_name = {a.name: a for a in agents.org_agents(org_id=org_id)}
    assert set(by_name) == {"Order triage", "Refunds", "Desk supervisor"}
    assert all(a.connection.provider == "scripted" and a.script for a in by_name.values())
    decisions = {p.grant.tool.qualified_name: p.now.decision for p in agents.effective_permissions(by_name["Refunds"])}
    assert decisions == {"orders.get_order_status": "allow", "orders.refund_order": "hold",
                         "orders.delete_customer": "deny"}
    triage = {p.grant.tool.qualified_name: p.now.decision
              for p in agents.effective_permissions(by_name["Order triage"])}
    assert triage == {"orders.get_order_status": "allow", "orders.list_orders": "allow"}
    desk = {c.name: c for c in crews.org_crews(org_id=org_id)}
    assert [t.name for t in desk["Refund desk"].tasks.all()] == ["triage", "refund"]
    assert desk["Order desk (supervised)"].supervisor.name == "Desk supervisor"

    versions = AgentVersion.objects.filter(org_id=org_id).count()
    assert seed_demo().created is False
    assert AgentVersion.objects.filter(org_id=org_id).count() == versions


def test_seed_demo_leaves_one_real_run_waiting_in_the_inbox(db, settings, tmp_path):
    from apps.approvals.selectors import org_approvals
    from apps.demo.services import seed_demo
    from apps.runs.models import Run

    settings.VAR_DIR = tmp_path
    seed_demo()
    org_id = Organization.objects.get(slug="demo").id
    run = Run.objects.get(org_id=org_id)
    assert run.crew_name == "Refund desk" and run.status == "waiting"
    pending = list(org_approvals(org_id=org_id, status="pending"))
    assert [a.tool.qualified_name for a in pending] == ["orders.refund_order"]
    assert pending[0].arguments["amount_cents"] == 1500
    seed_demo()
    assert Run.objects.filter(org_id=org_id).count() == 1


def test_seed_demo_prices_the_scripted_model_as_a_marked_example_so_the_costs_show_spend(db, settings, tmp_path):
    from apps.costs.models import ModelPrice, UsageRecord
    from apps.demo.services import EXAMPLE_PRICE_NOTE, seed_demo
    from apps.runs.models import Run

    settings.VAR_DIR = tmp_path
    seed_demo()
    org_id = Organization.objects.get(slug="demo").id
    price = ModelPrice.objects.get(org_id=org_id, model="scripted")
    assert price.note == EXAMPLE_PRICE_NOTE and "not a real cost" in price.note
    run = Run.objects.get(org_id=org_id)
    assert run.cost_usd > 0 and run.cost_unknown_calls == 0
    assert UsageRecord.objects.filter(org_id=org_id, cost_usd__gt=0).exists()
    seed_demo()
    assert ModelPrice.objects.filter(org_id=org_id, model="scripted").count() == 1

    from django.test import Client

    from apps.accounts.models import Membership

    client = Client()
    client.force_login(Membership.objects.get(org_id=org_id, role="owner").user)
    page = client.get("/costs/").content.decode()
    assert 'data-testid="example-prices"' in page and "not a real cost" in page
