"""Appending run events: one row with the next per-run `seq`, published after commit."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.db import connections, transaction
from django.utils import timezone

from apps.audit.redaction import redact
from apps.core.realtime import org_group, publish_after_commit, run_group
from apps.runs.models import Run, RunEvent

# One statement on Postgres: the UPDATE takes the run row's lock (held to commit, so seqs stay
# gapless and in commit order) and hands its new last_seq to the INSERT. It replaces a
# SELECT ... FOR UPDATE, an UPDATE and an INSERT: events are ~5 per engine step (bench/run.py).
_APPEND_SQL = """
WITH next AS (UPDATE runs_run SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq)
INSERT INTO runs_runevent (run_id, seq, type, data, at) SELECT %s, last_seq, %s, %s::jsonb, %s FROM next
RETURNING id, seq
"""


def append_event(run_id: UUID | str, type: str, **data: Any) -> RunEvent:
    """Takes the run row's lock for the sequence number; call inside the transaction of the change."""
    data, at = redact(data), timezone.now()
    connection = connections[RunEvent.objects.db]
    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_APPEND_SQL, [str(run_id), str(run_id), type, json.dumps(data), at])
            row = cursor.fetchone()
        if row is None:
            raise Run.DoesNotExist(f"No run {run_id}.")
        event = RunEvent(id=row[0], run_id=run_id, seq=row[1], type=type, data=data, at=at)
    else:
        with transaction.atomic():
            run = Run.objects.select_for_update().only("id", "org_id", "last_seq").get(id=run_id)
            seq = run.last_seq + 1
            Run.objects.filter(id=run_id).update(last_seq=seq)
            event = RunEvent.objects.create(run_id=run_id, seq=seq, type=type, data=data)
    publish_after_commit(run_group(run_id), "run.event", run_id=str(run_id), seq=event.seq, type=type)
    return event


def publish_status(run: Run) -> None:
    publish_after_commit(org_group(run.org_id), "run.status", run_id=str(run.id), status=run.status)
