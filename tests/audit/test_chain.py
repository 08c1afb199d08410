"""The audit trail is append-only and tamper-evident."""

from __future__ import annotations

import itertools

import pytest
from django.db import DatabaseError, connection, transaction

from apps.accounts import services
from apps.accounts.actors import member_actor
from apps.audit.models import AuditEvent
from apps.audit.redaction import redact
from apps.audit.selectors import verify_chain

pytestmark = pytest.mark.django_db


def test_each_change_extends_the_orgs_chain(owner):
    services.add_member(actor=member_actor(owner), email="a@example.com", role="viewer")
    services.add_member(actor=member_actor(owner), email="b@example.com", role="viewer")
    events = list(AuditEvent.objects.filter(org=owner.org).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for earlier, later in itertools.pairwise(events):
        assert later.prev_hash == earlier.hash
    assert verify_chain(org_id=owner.org_id).intact


def test_the_orm_refuses_to_edit_or_delete_events(owner):
    event = AuditEvent.objects.filter(org=owner.org).first()
    event.action = "forged"
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(org=owner.org).update(action="forged")
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(org=owner.org).delete()


def test_a_tampered_row_is_detected(owner):
    services.add_member(actor=member_actor(owner), email="a@example.com", role="viewer")
    target = AuditEvent.objects.filter(org=owner.org, action="member.added").first()
    table = AuditEvent._meta.db_table
    with connection.cursor() as cursor:
        # An attacker with database access first gets the append-only trigger out of the way.
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = replica")
        else:
            cursor.execute("DROP TRIGGER audit_event_no_update")
        cursor.execute(f"UPDATE {table} SET actor_label = 'someone-else' WHERE id = %s",
                       [target.id.hex if connection.vendor == "sqlite" else str(target.id)])
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = DEFAULT")
    check = verify_chain(org_id=owner.org_id)
    assert not check.intact
    assert check.broken_at_seq == target.seq


def test_the_database_itself_refuses_rewrites(owner):
    statements = ["UPDATE {table} SET action = 'x'"]
    if connection.vendor == "postgresql":
        statements.append("DELETE FROM {table}")
    for statement in statements:
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement.format(table=AuditEvent._meta.db_table))
    assert AuditEvent.objects.filter(org=owner.org).exclude(action="x").exists()


def test_sign_ins_and_failures_are_recorded(client, owner):
    client.post("/login/", {"username": owner.user.email, "password": "wrong"})
    client.post("/login/", {"username": owner.user.email, "password": "correct-horse-battery-staple"})
    actions = list(AuditEvent.objects.filter(org=owner.org).values_list("action", flat=True))
    assert "auth.sign_in_failed" in actions
    assert "auth.signed_in" in actions
    failed = AuditEvent.objects.get(org=owner.org, action="auth.sign_in_failed")
    assert "wrong" not in str(failed.data)


def test_secrets_are_redacted_by_key_and_by_shape():
    data = {"password": "hunter2", "env": {"GITHUB_TOKEN": "x"}, "note": "use sk-abcdefghijklmnopqrstuvwx",
            "name": "ok"}
    clean = redact(data)
    assert clean["password"] == "[redacted]"
    assert clean["env"] == "[redacted]"
    assert "sk-abc" not in clean["note"]
    assert clean["name"] == "ok"
