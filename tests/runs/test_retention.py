"""Retention as an admin sets it and beat applies it: finished runs past the window lose their events,
conversations and tool-call payloads; the run, its ledger rows, costs and the audit log stay, and the
audit chain still verifies. A dry run changes nothing; runs inside the window are untouched."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.audit.models import AuditEvent
from apps.audit.selectors import verify_chain
from apps.core.errors import PermissionDenied, ValidationFailed
from apps.runs import retention, services, worker
from apps.runs.models import Run, RunEvent, RunStep, ToolCall

pytestmark = pytest.mark.django_db
A1001 = {"order_id": "A-1001", "amount_cents": 500}


def finished_run(desk, *, days_ago: float):
    crew = desk.refund_desk(refund_policy="auto", name=f"Desk {days_ago}")
    run = services.start_run(actor=desk.actor, crew_id=crew.id, inputs=A1001, enqueue=False)
    run = worker.drive_run(run_id=run.id)
    assert run.status == "succeeded", run.error
    Run.objects.filter(id=run.id).update(finished_at=timezone.now() - timedelta(days=days_ago))
    return run


def detail(run) -> tuple[int, int, int]:
    return (RunEvent.objects.filter(run=run).count(),
            RunStep.objects.filter(run=run, conversation__isnull=False).distinct().count(),
            ToolCall.objects.filter(run=run).exclude(arguments={}).count())


def test_old_runs_lose_their_detail_and_keep_their_history(desk, org):
    old, recent = finished_run(desk, days_ago=40), finished_run(desk, days_ago=2)
    assert all(detail(old)) and all(detail(recent))
    calls_before = list(ToolCall.objects.filter(run=old).values_list("qualified_name", "state", "decision"))
    retention.set_retention(actor=desk.actor, days=30)

    out = StringIO()
    call_command("apply_retention", "--dry-run", stdout=out)
    assert "1 run(s); would remove" in out.getvalue()
    assert all(detail(old))  # nothing changed

    call_command("apply_retention", stdout=out)
    assert detail(old) == (0, 0, 0)
    assert all(detail(recent))  # inside the window
    kept = Run.objects.get(id=old.id)
    assert kept.status == "succeeded" and kept.output.startswith("Refunded") and kept.cost_usd is not None
    assert list(ToolCall.objects.filter(run=old).values_list("qualified_name", "state", "decision")) == calls_before
    applied = AuditEvent.objects.get(org_id=org.id, action="runs.retention_applied")
    assert applied.data["runs"] == 1 and applied.data["events"] > 0 and applied.data["tool_calls"] == 3
    assert AuditEvent.objects.filter(org_id=org.id, action="run.started").count() == 2  # audit rows stay
    assert verify_chain(org_id=org.id).intact

    again = StringIO()
    call_command("apply_retention", stdout=again)  # already pruned: nothing more
    assert "0 run(s)" in again.getvalue() or "run(s)" not in again.getvalue()
    assert AuditEvent.objects.filter(org_id=org.id, action="runs.retention_applied").count() == 1


def test_without_a_setting_everything_is_kept(desk):
    old = finished_run(desk, days_ago=400)
    out = StringIO()
    call_command("apply_retention", stdout=out)
    assert "everything is kept" in out.getvalue()
    assert all(detail(old))


def test_only_admins_set_retention_and_bad_values_are_named(desk, viewer):
    with pytest.raises(PermissionDenied):
        retention.set_retention(actor=member_actor(viewer), days=30)
    with pytest.raises(ValidationFailed) as bad:
        retention.set_retention(actor=desk.actor, days=0)
    assert "days" in bad.value.errors
    retention.set_retention(actor=desk.actor, days=90)
    assert retention.retention_days(org_id=desk.actor.org_id) == 90
    retention.set_retention(actor=desk.actor, days=None)
    assert retention.retention_days(org_id=desk.actor.org_id) is None


def test_an_admin_sets_retention_on_the_system_page(client, owner, viewer):
    client.force_login(owner.user)
    page = client.get("/settings/system/")
    assert b'name="days"' in page.content and b"placeholder=\"forever\"" in page.content
    saved = client.post("/settings/system/retention/", {"days": "45"}, follow=True)
    assert b"keep their detail for 45 days" in saved.content and b'value="45"' in saved.content
    bad = client.post("/settings/system/retention/", {"days": "lots"}, follow=True)
    assert b"is not a number of days" in bad.content
    assert retention.retention_days(org_id=owner.org_id) == 45
    client.force_login(viewer.user)
    assert b'name="days"' not in client.get("/settings/system/").content
    client.post("/settings/system/retention/", {"days": "1"})
    assert retention.retention_days(org_id=owner.org_id) == 45
