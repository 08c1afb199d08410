"""Appending run events: one row with the next per-run `seq`, published after commit."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connections, transaction
from django.db.models import F
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
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(_APPEND_SQL, [str(run_id), str(run_id), type, json.dumps(data), at])
            row = cursor.fetchone()
        if row is None:
            raise Run.DoesNotExist(f"No run {run_id}.")
        event = RunEvent(id=row[0], run_id=run_id, seq=row[1], type=type, data=data, at=at)
    else:
        with transaction.atomic(savepoint=False):
            run = Run.objects.select_for_update().only("id", "org_id", "last_seq").get(id=run_id)
            seq = run.last_seq + 1
            Run.objects.filter(id=run_id).update(last_seq=seq)
            event = RunEvent.objects.create(run_id=run_id, seq=seq, type=type, data=data)
    _publish(run_id, event.seq, type, data, at)
    return event


# A run page's socket sends an event carried by its nudge straight away when it is the next one it
# expects; otherwise (a gap, a coalesced burst, a big event) it reads the table.
CARRIED_EVENT_BYTES = 4096


def _publish(run_id: UUID | str, seq: int, type: str, data: dict[str, Any], at: Any, encoded: str = "") -> None:
    event = {"seq": seq, "type": type, "data": data, "at": at.isoformat()}
    carried = len(encoded or json.dumps(data, default=str)) <= CARRIED_EVENT_BYTES
    publish_after_commit(run_group(run_id), "run.event", run_id=str(run_id), seq=seq, type=type,
                         **({"carried": event} if carried else {}))


@dataclass
class Totals:
    """What a transaction adds to its run's counters (a model call's tokens and cost, its tool calls),
    written by the statement that appends the transaction's events: the run row is updated there anyway."""

    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    tool_calls: int = 0
    cost_usd: Decimal = Decimal(0)
    cost_unknown_calls: int = 0  # a call with no known price makes the run's cost unknown (NULL) for good

    def __bool__(self) -> bool:
        return self != Totals()

    def __add__(self, other: Totals) -> Totals:
        return Totals(**{name: getattr(self, name) + getattr(other, name) for name in self.__dataclass_fields__})

    def add_to(self, run: Run) -> None:
        """The same increments on the row in memory (the lease holder is the only writer of its counters)."""
        for name in ("tokens_in", "tokens_out", "tokens_cached", "tool_calls", "cost_unknown_calls"):
            setattr(run, name, getattr(run, name) + getattr(self, name))
        run.cost_usd = None if self.cost_unknown_calls or run.cost_usd is None else run.cost_usd + self.cost_usd

    def updates(self) -> dict[str, Any]:
        """The same increments as ORM expressions (SQLite, or no event batch)."""
        return {"tokens_in": F("tokens_in") + self.tokens_in, "tokens_out": F("tokens_out") + self.tokens_out,
                "tokens_cached": F("tokens_cached") + self.tokens_cached,
                "tool_calls": F("tool_calls") + self.tool_calls,
                "cost_usd": None if self.cost_unknown_calls else F("cost_usd") + self.cost_usd,
                "cost_unknown_calls": F("cost_unknown_calls") + self.cost_unknown_calls}


# Several events of one transaction in one statement: the run row's lock, `n` sequence numbers and the
# transaction's `Totals` at once, the rows from an array of types and a JSON array of payloads, zipped in their
# order (`ROWS FROM ... WITH ORDINALITY`). The payloads go as one JSON text: as a text[] each element's quotes
# would be escaped on the client, a regex replacement per quote.
_APPEND_MANY_SQL = """
WITH next AS (
  UPDATE runs_run SET last_seq = last_seq + %s, tokens_in = tokens_in + %s, tokens_out = tokens_out + %s,
    tokens_cached = tokens_cached + %s, tool_calls = tool_calls + %s, cost_unknown_calls = cost_unknown_calls + %s,
    cost_usd = CASE WHEN %s > 0 THEN NULL ELSE cost_usd + %s END
  WHERE id = %s RETURNING last_seq)
INSERT INTO runs_runevent (run_id, seq, type, data, at)
SELECT %s, next.last_seq - %s + e.ord, e.type, e.data, %s
FROM next, ROWS FROM (unnest(%s::text[]), jsonb_array_elements(%s::jsonb)) WITH ORDINALITY AS e(type, data, ord)
RETURNING seq
"""


def append_events(run_id: UUID | str, events: list[tuple[str, dict[str, Any]]], totals: Totals | None = None) -> None:
    """`append_event` for a batch, in order, and the run's `totals`: one statement on Postgres (the engine's
    store sends each transaction's events this way, at its end)."""
    with transaction.atomic(savepoint=False):
        send_events(run_id, events, totals)()


def send_events(run_id: UUID | str, events: list[tuple[str, dict[str, Any]]],
                totals: Totals | None = None) -> Callable[[], None]:
    """`append_events` in two halves, for a batch (apps.core.db.pipeline): sends the statement now and returns
    what reads its sequence numbers and publishes them, to be called once the batch's answers are in. Call
    inside the transaction of the change."""
    connection = connections[RunEvent.objects.db]
    if connection.vendor != "postgresql" or len(events) < 2:
        if totals:
            Run.objects.filter(id=run_id).update(**totals.updates())
        for type, data in events:
            append_event(run_id, type, **data)
        return lambda: None
    totals = totals or Totals()
    at, n = timezone.now(), len(events)
    types = [type for type, _ in events]
    redacted = [redact(data) for _, data in events]
    payloads = [json.dumps(data) for data in redacted]
    cursor = connection.cursor()
    cursor.execute(_APPEND_MANY_SQL, [
        n, totals.tokens_in, totals.tokens_out, totals.tokens_cached, totals.tool_calls,
        totals.cost_unknown_calls, totals.cost_unknown_calls, totals.cost_usd, str(run_id),
        str(run_id), n, at, types, f"[{','.join(payloads)}]"])

    def published() -> None:
        with cursor:
            seqs = sorted(row[0] for row in cursor.fetchall())
        if not seqs:
            raise Run.DoesNotExist(f"No run {run_id}.")
        for seq, type, data, encoded in zip(seqs, types, redacted, payloads, strict=True):
            _publish(run_id, seq, type, data, at, encoded)

    return published


def publish_status(run: Run) -> None:
    publish_after_commit(org_group(run.org_id), "run.status", run_id=str(run.id), status=run.status)
