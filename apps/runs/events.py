"""Appending run events: one row with the next per-run `seq`, published after commit."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction

from apps.audit.redaction import redact
from apps.core.realtime import org_group, publish_after_commit, run_group
from apps.runs.models import Run, RunEvent


def append_event(run_id: UUID | str, type: str, **data: Any) -> RunEvent:
    """Locks the run row for the sequence number; call inside the transaction of the change."""
    with transaction.atomic():
        run = Run.objects.select_for_update().only("id", "org_id", "last_seq").get(id=run_id)
        seq = run.last_seq + 1
        Run.objects.filter(id=run_id).update(last_seq=seq)
        event = RunEvent.objects.create(run_id=run_id, seq=seq, type=type, data=redact(data))
    publish_after_commit(run_group(run_id), "run.event", run_id=str(run_id), seq=seq, type=type)
    return event


def publish_status(run: Run) -> None:
    publish_after_commit(org_group(run.org_id), "run.status", run_id=str(run.id), status=run.status)
