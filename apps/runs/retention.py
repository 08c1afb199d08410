"""Retention: each organisation keeps the detail of its finished runs for as many days as it chose.

Past that, a finished run loses its events, its agents' conversations and its tool calls' arguments
and results. What stays: the run (status, inputs, output, totals, cost), its steps and ledger rows
(which tool, what policy decided, who approved, when) and the audit log, whose rows the database
refuses to delete, so its hash chain stays verifiable. Each pass is written to the audit log with
what it removed; `dry_run` counts without changing anything.

Runs with no retention setting keep everything. The beat task works through at most `BATCH` runs
per organisation per pass, so a first pass over years of history does not hold long locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor, system_actor
from apps.audit import services as audit
from apps.core.errors import ValidationFailed
from apps.runs.messages import count_conversations, forget_conversations
from apps.runs.models import Run, RunEvent, RunRetention, ToolCall

BATCH = 500
MAX_DAYS = 3650
PRUNED = "pruned_at"  # in a finished run's `state` (the engine's cursor, unused once a run has finished)


@dataclass
class Pass:
    org_id: str
    days: int
    cutoff: datetime
    runs: int = 0
    events: int = 0
    conversations: int = 0
    tool_calls: int = 0


def retention_days(*, org_id) -> int | None:
    return RunRetention.objects.filter(org_id=org_id).values_list("days", flat=True).first()


def set_retention(*, actor: Actor, days: int | None) -> int | None:
    """Keep finished runs' detail this many days (None: forever). Raises ValidationFailed, PermissionDenied."""
    actor.require("members.manage")
    if days is not None and not 1 <= int(days) <= MAX_DAYS:
        raise ValidationFailed(f"Keep run detail between 1 and {MAX_DAYS} days, or leave it empty to keep it forever.",
                               errors={"days": f"between 1 and {MAX_DAYS}, or empty"})
    with transaction.atomic():
        before = retention_days(org_id=actor.org_id)
        if days is None:
            RunRetention.objects.filter(org_id=actor.org_id).delete()
        else:
            RunRetention.objects.update_or_create(org_id=actor.org_id, defaults={"days": int(days)})
        audit.record(org_id=actor.org_id, actor=actor, action="runs.retention_set",
                     data={"days": days, "before": before})
    return days


def apply_retention(*, now: datetime | None = None, dry_run: bool = False) -> list[Pass]:
    """One pass over every organisation with a retention setting."""
    now = now or timezone.now()
    return [_apply(policy, now=now, dry_run=dry_run) for policy in RunRetention.objects.all()]


def _apply(policy: RunRetention, *, now: datetime, dry_run: bool) -> Pass:
    done = Pass(str(policy.org_id), policy.days, now - timedelta(days=policy.days))
    with transaction.atomic():
        run_ids = list(Run.objects.filter(org_id=policy.org_id, finished_at__lt=done.cutoff)
                       .exclude(state__has_key=PRUNED).order_by("finished_at")
                       .values_list("id", flat=True)[:BATCH])
        if not run_ids:
            return done
        done.runs = len(run_ids)
        events = RunEvent.objects.filter(run_id__in=run_ids)
        calls = ToolCall.objects.filter(run_id__in=run_ids).exclude(arguments={}, result__isnull=True)
        if dry_run:
            done.events, done.tool_calls = events.count(), calls.count()
            done.conversations = count_conversations(run_ids)
            return done
        done.events, _ = events.delete()
        done.conversations = forget_conversations(run_ids)
        done.tool_calls = calls.update(arguments={}, approved_arguments=None, result=None)
        Run.objects.filter(id__in=run_ids).update(state={PRUNED: now.isoformat()})
        audit.record(org_id=policy.org_id, actor=system_actor(policy.org_id, "retention"),
                     action="runs.retention_applied",
                     data={"days": policy.days, "cutoff": done.cutoff.isoformat(), "runs": done.runs,
                           "events": done.events, "conversations": done.conversations,
                           "tool_calls": done.tool_calls})
    return done
