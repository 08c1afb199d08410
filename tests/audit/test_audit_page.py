"""The audit page's verify-chain action, its CSV export and the redacted before/after of a change."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.audit.models import AuditEvent
from apps.costs import services as costs

pytestmark = pytest.mark.django_db


def tamper(event: AuditEvent) -> None:
    """What an attacker with database access does: get the append-only trigger out of the way, edit a row."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = replica")
        else:
            cursor.execute("DROP TRIGGER audit_event_no_update")
        cursor.execute(f"UPDATE {AuditEvent._meta.db_table} SET data = '{{\"role\": \"owner\"}}' WHERE id = %s",
                       [event.id.hex if connection.vendor == "sqlite" else str(event.id)])
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = DEFAULT")


def test_verify_chain_reports_intact_then_the_first_broken_link(client, owner):
    services.add_member(actor=member_actor(owner), email="a@example.com", role="viewer")
    services.add_member(actor=member_actor(owner), email="b@example.com", role="viewer")
    client.force_login(owner.user)
    intact = client.post("/audit/verify/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="chain-result"' in intact and "the chain is intact" in intact

    first_added = AuditEvent.objects.filter(org=owner.org, action="member.added").order_by("seq").first()
    tamper(first_added)
    broken = client.post("/audit/verify/", HTTP_HX_REQUEST="true").content.decode()
    assert f"The chain is broken at event #{first_added.seq}</strong> (member.added by {owner.user.email}" in broken
    assert f"Chain broken at event #{first_added.seq}" in client.get("/audit/").content.decode()
    exported = b"".join(client.get("/audit/export.csv").streaming_content).decode()
    rows = {int(r["seq"]): r for r in csv.DictReader(io.StringIO(exported))}
    assert rows[first_added.seq]["hash"] == first_added.hash  # the stored hash, for checking elsewhere


def test_the_audit_csv_follows_the_filters_and_is_admin_only(client, owner, viewer):
    client.force_login(owner.user)
    services.add_member(actor=member_actor(owner), email="c@example.com", role="viewer")
    exported = b"".join(client.get("/audit/export.csv?action=member.added").streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert rows and {r["action"] for r in rows} == {"member.added"}
    client.force_login(viewer.user)
    assert client.get("/audit/export.csv").status_code == 403


def test_a_budget_change_shows_before_and_after(client, owner):
    actor = member_actor(owner)
    costs.set_budget(actor=actor, scope="org", amount_usd="100")
    costs.set_budget(actor=actor, scope="org", amount_usd="250", thresholds=[80])
    client.force_login(owner.user)
    page = client.get("/audit/?action=costs.budget_set").content.decode()
    assert 'data-testid="audit-diff"' in page
    assert "<code>amount_usd</code></td><td class=\"text-red\">100.0000</td><td class=\"text-green\">250.0000" in page
