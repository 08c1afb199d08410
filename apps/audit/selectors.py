from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db.models import QuerySet

from apps.audit.models import AuditEvent
from apps.audit.services import event_hash


def audit_events(*, org_id: UUID, since: datetime | None = None, until: datetime | None = None,
                 actor: str = "", action: str = "") -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(org_id=org_id)
    if since:
        events = events.filter(created_at__gte=since)
    if until:
        events = events.filter(created_at__lt=until)
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if action:
        events = events.filter(action__startswith=action)
    return events.order_by("-seq")


def audit_actions(*, org_id: UUID) -> list[str]:
    return list(AuditEvent.objects.filter(org_id=org_id).values_list("action", flat=True).distinct().order_by("action"))


@dataclass(frozen=True)
class ChainCheck:
    intact: bool
    checked: int
    broken_at_seq: int | None = None


def verify_chain(*, org_id: UUID) -> ChainCheck:
    """Recomputes every hash of the organisation's chain; reports the first event that does not match."""
    prev = "0" * 64
    checked = 0
    for event in AuditEvent.objects.filter(org_id=org_id).order_by("seq").iterator(chunk_size=2000):
        expected = event_hash(
            prev_hash=prev, seq=event.seq, org_id=event.org_id, created_at=event.created_at.isoformat(),
            action=event.action, actor_label=event.actor_label,
            target=f"{event.target_type}:{event.target_id}", data=event.data,
        )
        if event.prev_hash != prev or event.hash != expected:
            return ChainCheck(intact=False, checked=checked, broken_at_seq=event.seq)
        prev = event.hash
        checked += 1
    return ChainCheck(intact=True, checked=checked)


def last_event(*, org_id: UUID, action: str, target_id: str) -> AuditEvent | None:
    """The newest event of one action on one target (who last changed a setting, and when)."""
    return AuditEvent.objects.filter(org_id=org_id, action=action, target_id=target_id).order_by("-seq").first()
