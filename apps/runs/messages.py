"""A turn's conversation as stored (`RunMessage` rows, one per message, JSON) and as the engine uses it
(pydantic-ai messages). The only writer of `RunMessage`: the run store appends through `write_messages`,
retention forgets through `forget_conversations`.

A step appends only the messages it adds, so what it writes stays the same size however long the
conversation is. A history that changed before its end (rare: the engine only appends) is replaced from the
first message that differs: the rows before it stay as they are.

A tool's answer carries the result text the ledger row already keeps (`ToolCall.result`); its part's metadata
says where (apps/runs/engine/tools.ledger_text_at). Stored, the text is cut out of the answer and put back from
the ledger when read, so each result is written once (a 2 KB result was written twice a step, both copies in
TOAST: the largest part of a step's WAL). A dumped message also spells out every field of its classes, most at
their defaults (a response's dozen empty provider fields, its usage's zero counters: ~1 KB around ~200 bytes of
content); stored, a field equal to its class's default is left out and put back when read. Every read here gives
the conversation back exactly as dumped."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.utils import timezone
from pydantic.fields import FieldInfo
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
)
from pydantic_ai.usage import RequestUsage

from apps.core.rows import Inserts
from apps.runs.models import RunMessage, RunStep, ToolCall

LEDGER_TEXT = "ledger_text"  # a tool-return part's metadata key: {"call": ToolCall id, "run", "at", "length"}
LEDGER_TEXT_MIN = 256  # shorter results are left in place: the reference would save little
GONE = "[this tool result is no longer kept]"


def dump_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def load_messages(data: list[dict[str, Any]] | None) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(data or [])


# --- reads -----------------------------------------------------------------------------------------------

def turn_messages(turn: RunStep) -> list[dict[str, Any]] | None:
    """The turn's conversation as stored (JSON), or None when it has none (a model call's step, or a turn whose
    conversation retention removed)."""
    payloads = list(RunMessage.objects.filter(turn_id=turn.id).order_by("seq").values_list("payload", flat=True))
    return as_dumped(payloads, turn.run_id) or None


def conversations(turn_ids: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """The conversations of several turns in one read: turn id (str) -> its messages (turns with none absent)."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    runs: dict[str, Any] = {}
    rows = RunMessage.objects.filter(turn_id__in=list(turn_ids)).order_by("turn_id", "seq")
    for turn_id, run_id, payload in rows.values_list("turn_id", "turn__run_id", "payload"):
        found[str(turn_id)].append(payload)
        runs[str(turn_id)] = run_id
    return {turn_id: as_dumped(payloads, runs[turn_id]) for turn_id, payloads in found.items()}


def as_dumped(payloads: list[dict[str, Any]], run_id: Any, *,
              texts: dict[str, str | None] | None = None) -> list[dict[str, Any]]:
    """A turn's stored messages as they were dumped: the fields left out at their defaults put back, and each tool
    answer's result text from its ledger row, one of the run's own (from `texts`, call id -> result text, when the
    caller read them already)."""
    payloads = [expanded(payload) for payload in payloads]
    cut = list(_cut(payloads))
    if not cut:
        return payloads
    texts = dict(texts or {})
    texts.update(_ledger_texts([ref["call"] for _, ref in cut if ref["call"] not in texts], run_id))
    out = []
    for payload in payloads:
        parts = payload.get("parts")
        if isinstance(parts, list) and any(_ref(part, cut=True) for part in parts):
            payload = {**payload, "parts": [_put_back(part, texts) for part in parts]}
        out.append(payload)
    return out


def ledger_texts_read() -> str:
    """SQL (param: a turn's id) for the result texts its answers may name: every call of the turn's model calls,
    as (id, text), for a reader that fetches them with the conversation (the run store)."""
    calls, steps = ToolCall._meta.db_table, RunStep._meta.db_table
    return (f"SELECT t.id, t.result->>'text' FROM {calls} t "  # noqa: S608
            f"WHERE t.step_id IN (SELECT l.id FROM {steps} l WHERE l.parent_id = %s) AND t.result IS NOT NULL")


def _ref(part: Any, *, cut: bool) -> dict[str, Any] | None:
    """The part's ledger reference: on a stored (`cut`) or a dumped tool answer."""
    metadata = part.get("metadata") if isinstance(part, dict) else None
    ref = metadata.get(LEDGER_TEXT) if isinstance(metadata, dict) else None
    if not isinstance(ref, dict) or part.get("part_kind") != "tool-return" or not isinstance(part.get("content"), str):
        return None
    return ref if bool(ref.get("cut")) == cut else None


def _cut(payloads: list[dict[str, Any]]):
    for payload in payloads:
        for part in payload.get("parts") or ():
            if ref := _ref(part, cut=True):
                yield part, ref


def _ledger_texts(call_ids: list[str], run_id: Any) -> dict[str, str | None]:
    """The result texts of these calls of the run (an id of another run's call finds nothing)."""
    if not call_ids:
        return {}
    rows = ToolCall.objects.filter(run_id=run_id, id__in=set(call_ids)).values_list("id", "result")
    return {str(call_id): (result or {}).get("text") for call_id, result in rows}


def _put_back(part: dict[str, Any], texts: dict[str, str | None]) -> dict[str, Any]:
    ref = _ref(part, cut=True)
    if ref is None:
        return part
    text = texts.get(ref["call"])
    if text is None or len(text) != ref["length"]:  # retention emptied the row (it forgets both together)
        text = GONE
    content, at = part["content"], ref["at"]
    kept = {key: value for key, value in ref.items() if key != "cut"}
    return {**part, "content": content[:at] + text + content[at:], "metadata": {**part["metadata"], LEDGER_TEXT: kept}}


def _stored(payload: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The message as stored: each tool answer without the result text its ledger row keeps. Only this run's
    rows: a fork starts from its parent's answers, whose rows retention may empty while the fork is kept, so
    those stay whole in the fork."""
    parts = payload.get("parts")
    if not isinstance(parts, list) or not any(_ref(part, cut=False) for part in parts):
        return compacted(payload)
    out = []
    for part in parts:
        if (ref := _ref(part, cut=False)) is not None and ref.get("run") == run_id:
            content, at, length = part["content"], ref["at"], ref["length"]
            part = {**part, "content": content[:at] + content[at + length:],
                    "metadata": {**part["metadata"], LEDGER_TEXT: {**ref, "cut": True}}}
        out.append(part)
    return compacted({**payload, "parts": out})


# --- fields at their defaults ------------------------------------------------------------------------------
# Keyed by the discriminator a dumped object carries ("kind" of a message, "part_kind" of a part; "usage" for a
# response's usage): {field: default} for the fields whose default is a plain JSON value (None, a bool, number or
# string) or an empty dict or list. Read off pydantic-ai's own classes, so a field a new release adds is covered;
# the discriminators themselves are always kept (the reader needs them to know the class), and where several
# classes share one (a typed tool part and its base) only the defaults they all have are left out.

def _json_defaults(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in ("kind", "part_kind") or not _dumped_as_named(hints.get(field.name)):
            continue
        if field.default is None or type(field.default) in (bool, int, float, str):
            out[field.name] = field.default
        elif field.default_factory in (dict, list) or typing.get_origin(field.default_factory) in (dict, list):
            out[field.name] = field.default_factory()
    return out


def _dumped_as_named(hint: Any) -> bool:
    """Whether a field is always dumped under its own name: not one pydantic leaves out (`exclude`, `exclude_if`:
    putting it back would add what was never there) or renames (an alias)."""
    for meta in typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ():
        if isinstance(meta, FieldInfo) and (meta.exclude or meta.exclude_if is not None or meta.alias
                                            or meta.serialization_alias):
            return False
    return True


def _classes(union: Any) -> Iterable[type]:
    """The dataclasses of an annotated, tagged union (pydantic-ai's part types)."""
    for member in typing.get_args(typing.get_args(union)[0]):
        cls = typing.get_args(member)[0] if typing.get_origin(member) is typing.Annotated else member
        if dataclasses.is_dataclass(cls):
            yield cls


@functools.cache
def _defaults() -> dict[tuple[str, Any], dict[str, Any]]:
    table = {("kind", cls.kind): _json_defaults(cls) for cls in (ModelRequest, ModelResponse)}
    for cls in (*_classes(ModelRequestPart), *_classes(ModelResponsePart)):
        kind = ("part_kind", next(field.default for field in dataclasses.fields(cls) if field.name == "part_kind"))
        defaults = _json_defaults(cls)
        if kind in table:  # subclasses share their base's part_kind (told apart by tool_kind): what all agree on
            defaults = {key: value for key, value in defaults.items()
                        if key in table[kind] and _same(table[kind][key], value)}
        table[kind] = defaults
    table[("usage", None)] = _json_defaults(RequestUsage)
    return table


def _same(value: Any, default: Any) -> bool:
    """Equal and of the same JSON type (0 and 0.0 are one number; False is not 0)."""
    return value == default and (type(value) is type(default) or {type(value), type(default)} <= {int, float})


def _slim(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in defaults or not _same(value, defaults[key])}


def _each_object(payload: dict[str, Any], apply: Any) -> dict[str, Any]:
    """`apply(data, defaults)` to the message, each of its parts and its usage, each with its class's defaults."""
    table = _defaults()
    out = apply(payload, table.get(("kind", payload.get("kind")), {}))
    if isinstance(parts := payload.get("parts"), list):
        out["parts"] = [apply(part, table.get(("part_kind", part.get("part_kind")), {}))
                        if isinstance(part, dict) else part for part in parts]
    if isinstance(usage := payload.get("usage"), dict):
        out["usage"] = apply(usage, table[("usage", None)])
    return out


def _full(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {**{key: value.copy() if isinstance(value, dict | list) else value for key, value in defaults.items()},
            **data}


def compacted(payload: dict[str, Any]) -> dict[str, Any]:
    """A dumped message without the fields at their class's default (`expanded` puts them back)."""
    return _each_object(payload, _slim)


def expanded(payload: dict[str, Any]) -> dict[str, Any]:
    """A stored message as dumped: every field left out at its default put back (a whole one is unchanged)."""
    return _each_object(payload, _full)


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
    _inserts().send([RunMessage(turn_id=turn.id, seq=start + i, payload=_stored(payload, str(turn.run_id)),
                                created_at=now) for i, payload in enumerate(payloads)])


def forget_conversations(run_ids: list[Any]) -> int:
    """Removes the conversations of these runs (retention); returns how many turns had one."""
    turns = count_conversations(run_ids)
    RunMessage.objects.filter(turn__run_id__in=run_ids).delete()
    return turns


def count_conversations(run_ids: list[Any]) -> int:
    """How many turns of these runs have a conversation (retention's dry run)."""
    return RunMessage.objects.filter(turn__run_id__in=run_ids).values("turn_id").distinct().count()
