"""A turn's conversation as stored (`RunMessage` rows, one per message, JSON) and as the engine uses it
(pydantic-ai messages). The only writer of `RunMessage`: the run store appends through `write_messages`,
retention forgets through `forget_conversations`.

A step appends only the messages it adds, so what it writes stays the same size however long the
conversation is. A history that changed before its end (rare: the engine only appends) is replaced from the
first message that differs: the rows before it stay as they are."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.utils import timezone
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from apps.core.rows import Inserts
from apps.runs.models import RunMessage, RunStep


def dump_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def load_messages(data: list[dict[str, Any]] | None) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(data or [])


# --- reads -----------------------------------------------------------------------------------------------

def turn_messages(turn: RunStep) -> list[dict[str, Any]] | None:
    """The turn's conversation as stored (JSON), or None when it has none (a model call's step, or a turn whose
    conversation retention removed)."""
    payloads = list(RunMessage.objects.filter(turn_id=turn.id).order_by("seq").values_list("payload", flat=True))
    return payloads or None


def conversations(turn_ids: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """The conversations of several turns in one read: turn id (str) -> its messages (turns with none absent)."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = RunMessage.objects.filter(turn_id__in=list(turn_ids)).order_by("turn_id", "seq")
    for turn_id, payload in rows.values_list("turn_id", "payload"):
        found[str(turn_id)].append(payload)
    return dict(found)


# --- writes ----------------------------------------------------------------------------------------------

_DELETE_FROM_SQL = f"DELETE FROM {RunMessage._meta.db_table} WHERE turn_id = %s AND seq >= %s"  # noqa: S608


@functools.cache
def _inserts() -> Inserts:
    return Inserts(RunMessage)


def write_messages(turn: RunStep, payloads: list[dict[str, Any]], *, start: int, replace: bool) -> None:
    """Stores `payloads` as the turn's messages from index `start` on. `replace`: the history changed at `start`
    (not only grew), so its rows from there on are removed first. Sends statements only, no result read, so it
    can run in a pipelined batch (apps.core.db.pipeline)."""
    if replace:
        with connection.cursor() as cursor:
            cursor.execute(_DELETE_FROM_SQL, [RunStep._meta.pk.get_db_prep_value(turn.id, connection), start])
    now = timezone.now()
    _inserts().send([RunMessage(turn_id=turn.id, seq=start + i, payload=payload,
                                created_at=now) for i, payload in enumerate(payloads)])


def forget_conversations(run_ids: list[Any]) -> int:
    """Removes the conversations of these runs (retention); returns how many turns had one."""
    turns = count_conversations(run_ids)
    RunMessage.objects.filter(turn__run_id__in=run_ids).delete()
    return turns


def count_conversations(run_ids: list[Any]) -> int:
    """How many turns of these runs have a conversation (retention's dry run)."""
    return RunMessage.objects.filter(turn__run_id__in=run_ids).values("turn_id").distinct().count()
