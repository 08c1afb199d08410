"""Writing audit events. Call `record` inside the transaction of the change it describes."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Protocol
from uuid import UUID, uuid4

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from apps.audit.models import GLOBAL_CHAIN, AuditChainHead, AuditEvent
from apps.audit.redaction import redact
from apps.core.rows import Inserts, Update


class AuditActor(Protocol):
    """Who did it: a signed-in member, an API token, or the system (see accounts.Actor)."""

    label: str
    user_id: int | None
    token_id: UUID | None
    ip: str | None


def event_hash(*, prev_hash: str, seq: int, org_id: UUID | None, created_at: str, action: str,
               actor_label: str, target: str, data: dict[str, Any]) -> str:
    body = json.dumps(
        [prev_hash, seq, str(org_id or ""), created_at, action, actor_label, target, data],
        sort_keys=True, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _locked_head(chain: UUID) -> AuditChainHead:
    head = AuditChainHead.objects.select_for_update().filter(chain=chain).first()
    if head is not None:
        return head
    try:
        with transaction.atomic():
            AuditChainHead.objects.create(chain=chain)
    except IntegrityError:
        pass  # another writer created it first
    return AuditChainHead.objects.select_for_update().get(chain=chain)


def record(*, org_id: UUID | None, actor: AuditActor | None, action: str, target: Any = None,
           target_label: str = "", data: dict[str, Any] | None = None) -> AuditEvent:
    """Appends one event to the organisation's chain (redacting secrets from `data`).

    Must run inside the caller's transaction: the event and the change commit together (no savepoint:
    a failure here fails the change).
    """
    with transaction.atomic(savepoint=False):
        head = _locked_head(org_id or GLOBAL_CHAIN)
        now = timezone.now()
        clean = redact(data or {})
        target_type = target._meta.label_lower if target is not None else ""
        target_id = str(target.pk) if target is not None else ""
        actor_label = actor.label if actor else "system"
        seq = head.seq + 1
        digest = event_hash(
            prev_hash=head.hash, seq=seq, org_id=org_id, created_at=now.isoformat(), action=action,
            actor_label=actor_label, target=f"{target_type}:{target_id}", data=clean,
        )
        event = AuditEvent(
            org_id=org_id, seq=seq, created_at=now, action=action, actor_label=actor_label,
            actor_user_id=getattr(actor, "user_id", None), actor_token_id=getattr(actor, "token_id", None),
            target_type=target_type, target_id=target_id, target_label=target_label or str(target or "")[:200],
            data=clean, ip=getattr(actor, "ip", None), prev_hash=head.hash, hash=digest,
        )
        connection = connections[AuditEvent.objects.db]
        if connection.vendor == "postgresql":
            # The event and the chain head's move in one statement (one round trip, not two).
            with connection.cursor() as cursor:
                cursor.execute(_RECORD_SQL, [
                    seq, digest, head.chain, event.id, org_id, seq, now, action, actor_label, event.actor_user_id,
                    event.actor_token_id, target_type, target_id, event.target_label, json.dumps(clean), event.ip,
                    head.hash, digest])
            event._state.adding, event._state.db = False, connection.alias
        else:
            event.save(force_insert=True)
            AuditChainHead.objects.filter(chain=head.chain).update(seq=seq, hash=digest)
        head.seq, head.hash = seq, digest
    return event


_RECORD_SQL = """
WITH head AS (UPDATE audit_auditchainhead SET seq = %s, hash = %s WHERE chain = %s)
INSERT INTO audit_auditevent (id, org_id, seq, created_at, action, actor_label, actor_user_id, actor_token_id,
                              target_type, target_id, target_label, data, ip, prev_hash, hash)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::inet, %s, %s)
"""


def send_record(*, org_id: UUID | None, actor: AuditActor | None, action: str, target: Any = None,
                target_label: str = "", data: dict[str, Any] | None = None) -> None:
    """`record` for a batch of writes (apps.core.db.pipeline): statements that read nothing back, so the
    event costs no round trip of its own. Postgres appends it to the chain itself: the statement locks the
    chain head and computes the new hash from it (the same SHA-256 over the same JSON as `event_hash`:
    Python sends the JSON after the head's two fields). On other databases it is `record`.

    Must run inside the caller's transaction, as `record`; a failure fails the batch."""
    connection = connections[AuditEvent.objects.db]
    if connection.vendor != "postgresql":
        record(org_id=org_id, actor=actor, action=action, target=target, target_label=target_label, data=data)
        return
    now = timezone.now()
    clean = redact(data or {})
    target_type = target._meta.label_lower if target is not None else ""
    target_id = str(target.pk) if target is not None else ""
    actor_label = actor.label if actor else "system"
    # event_hash's list without its first two items (prev_hash, seq), which the statement puts in front.
    tail = json.dumps([str(org_id or ""), now.isoformat(), action, actor_label, f"{target_type}:{target_id}", clean],
                      sort_keys=True, separators=(",", ":"), default=str)[1:]
    chain = org_id or GLOBAL_CHAIN
    with connection.cursor() as cursor:
        cursor.execute(_HEAD_SQL, [chain])
        cursor.execute(_SEND_RECORD_SQL, [
            tail, chain, uuid4(), org_id, now, action, actor_label, getattr(actor, "user_id", None),
            getattr(actor, "token_id", None), target_type, target_id,
            (target_label or str(target or ""))[:200], json.dumps(clean), getattr(actor, "ip", None)])


_HEAD_SQL = "INSERT INTO audit_auditchainhead (chain, seq, hash) VALUES (%s, 0, repeat('0', 64)) " \
            "ON CONFLICT (chain) DO NOTHING"
# `old` locks the head and, under that lock, is its latest version: the new seq and hash follow from it and
# the event keeps its hash as prev_hash (UPDATE ... RETURNING shows only the new values).
_SEND_RECORD_SQL = """
WITH head AS (
    UPDATE audit_auditchainhead h
    SET seq = old.seq + 1,
        hash = encode(sha256(convert_to('["' || old.hash || '",' || (old.seq + 1)::text || ',' || %s, 'UTF8')), 'hex')
    FROM (SELECT chain, seq, hash FROM audit_auditchainhead WHERE chain = %s FOR UPDATE) old
    WHERE h.chain = old.chain
    RETURNING h.seq, h.hash, old.hash AS prev_hash
)
INSERT INTO audit_auditevent (id, org_id, seq, created_at, action, actor_label, actor_user_id, actor_token_id,
                              target_type, target_id, target_label, data, ip, prev_hash, hash)
SELECT %s, %s, head.seq, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::inet, head.prev_hash, head.hash FROM head
"""


def record_many(*, org_id: UUID | None, entries: list[dict[str, Any]]) -> list[AuditEvent]:
    """Appends several events to one organisation's chain in one go (one lock, one insert per event, sent
    together).

    Each entry has the keyword arguments of `record` (actor, action, target, target_label, data).
    For writers that batch many small events off the request path (the MCP gateway's calls).
    Must run inside the caller's transaction. It reads only the chain's head, so inside a batch
    (apps.core.db.pipeline) the events and the head's move go out with whatever the batch sends after them.
    """
    if not entries:
        return []
    chain = org_id or GLOBAL_CHAIN
    with transaction.atomic(savepoint=False):
        seq, prev = _head_for_update(chain)
        events = []
        for entry in entries:
            now = timezone.now()
            actor, target = entry.get("actor"), entry.get("target")
            clean = redact(entry.get("data") or {})
            target_type = target._meta.label_lower if target is not None else ""
            target_id = str(target.pk) if target is not None else ""
            actor_label = actor.label if actor else "system"
            seq += 1
            digest = event_hash(prev_hash=prev, seq=seq, org_id=org_id, created_at=now.isoformat(),
                                action=entry["action"], actor_label=actor_label,
                                target=f"{target_type}:{target_id}", data=clean)
            events.append(AuditEvent(
                org_id=org_id, seq=seq, created_at=now, action=entry["action"], actor_label=actor_label,
                actor_user_id=getattr(actor, "user_id", None), actor_token_id=getattr(actor, "token_id", None),
                target_type=target_type, target_id=target_id,
                target_label=entry.get("target_label") or str(target or "")[:200], data=clean,
                ip=getattr(actor, "ip", None), prev_hash=prev, hash=digest))
            prev = digest
        _event_inserts().send(events)
        _head_moves().execute({"seq": seq, "hash": prev}, {"chain": chain})
    return events


def _head_for_update(chain: UUID) -> tuple[int, str]:
    """The chain head's (seq, hash), locked until the transaction ends; a new chain's head is made first (no
    `except IntegrityError`, which cannot work inside a batch: another writer's new head is simply kept)."""
    connection = connections[AuditChainHead.objects.db]
    if connection.vendor != "postgresql":
        head = _locked_head(chain)
        return head.seq, head.hash
    with connection.cursor() as cursor:
        cursor.execute(_HEAD_SQL, [chain])
        cursor.execute("SELECT seq, hash FROM audit_auditchainhead WHERE chain = %s FOR UPDATE", [chain])
        seq, digest = cursor.fetchone()
    return seq, digest


@functools.cache
def _event_inserts() -> Inserts:
    return Inserts(AuditEvent)


@functools.cache
def _head_moves() -> Update:
    return Update(AuditChainHead, ["seq", "hash"], ["chain"])
