"""The run store: every database read and write the engine makes, for one claimed run.

The engine (apps/runs/engine/) is plain Python over this object. Each method is its own
transaction (or joins the caller's), appends the run events for what it changed and publishes
them after commit, so the engine commits every step before the next.

Its tool-call methods are `store/calls.py` (a mixin), the SQL it builds once and small helpers
`store/reads.py`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone
from pydantic_ai.messages import ModelMessage, ModelResponse

from apps.agents.models import LlmConnection
from apps.agents.providers import ConnectionSpec
from apps.audit.org_secrets import redact_outside
from apps.core.db import NothingUpdated, end_transaction, pipeline, send_expected
from apps.core.rows import fetch, fetch_together
from apps.costs import selectors as costs_selectors
from apps.costs import services as costs
from apps.costs.models import ModelPrice
from apps.costs.pricing import find_override, override_from, override_statement, price_call
from apps.costs.rollup import FirstCalls
from apps.registry import resources as registry_resources
from apps.registry.models import Resource
from apps.runs import ledger
from apps.runs.engine.errors import LeaseLost
from apps.runs.lease import LeaseHeartbeat, lease_seconds
from apps.runs.ledger import Totals, publish_status, send_events
from apps.runs.messages import as_dumped, dump_messages, ledger_texts_read, load_messages, turn_messages, write_messages
from apps.runs.models import Run, RunEvent, RunStatus, RunStep, StepKind, ToolCall
from apps.runs.store.calls import ToolCalls
from apps.runs.store.notices import EVERYTHING, ChangeNotices, Changes
from apps.runs.store.reads import (
    connection_read,
    cursor_update,
    hand_back_update,
    last_calls_read,
    messages_read,
    park_lock_read,
    pending_read,
    run_lock_read,
    run_read,
    step_inserts,
    turn_calls_read,
    turn_end_update,
    turn_read,
    usage_read,
)

# A write held for the store's next transaction. It runs inside a batch (`_write_batch`, `_write_end`), so it
# only sends statements; what must read a result or may raise returns a function, called after the batch
# (and before COMMIT: a store with such a write pending sends its deferred writes on their own).
Deferred = Callable[[], Callable[[], None] | None]

UNTRUSTED_KEPT = 256 * 1024  # characters of untrusted results kept per run for the copied-argument check


class RunStore(ToolCalls):
    def __init__(self, run_id: str, lease_owner: str, *, run: Run | None = None) -> None:
        """`run`: the row as the caller read it just now (the claim), so the first step need not read it."""
        self.run_id, self.lease_owner = str(run_id), lease_owner
        self.run = run if run is not None else Run.objects.get(id=run_id)
        self._fresh = run is not None
        # While this store's worker holds the lease it is the only writer of the run's turns, so the
        # turn in progress and its parsed history stay in memory between steps: a step parses and
        # dumps only the messages it adds, not the whole conversation: a step's cost stays flat as it grows.
        self._turn: RunStep | None = None
        self._history: dict[str, tuple[list[dict[str, Any]], list[ModelMessage]]] = {}  # turn -> (stored, parsed)
        # Likewise what this store wrote itself: step positions, each turn's model calls and the last
        # one, that call's ledger rows (kept current by set_call), the decrypted connection.
        self._position: int | None = None
        self._calls: dict[str, int] = {}
        self._last_call: dict[str, RunStep] = {}
        self._rows: dict[str, list[ToolCall]] = {}
        self._calls_read: dict[str, list[tuple]] = {}  # turn -> its last model call's rows, read with the turn
        self._connections: dict[str, ConnectionSpec] = {}
        self._decided: Counter[tuple[str, str]] | None = None  # (tool, args hash) of calls past `proposed`
        self._budgets: dict[str, bool] = {}  # agent id -> does any budget apply to its calls
        self._live: dict[str, Any] = {}  # approvals read in this step
        # The registry's rows of the tools called (with their servers), and whether the run row must be read
        # again: kept from step to step while change notices are heard (`notices`), else read every step.
        self._tools: dict[str, Any] = {}
        self._run_stale = False
        self.notices: ChangeNotices | None = None  # set by the task that claimed the run (advance_run)
        self.heartbeat: LeaseHeartbeat | None = None  # likewise, when a thread renews the lease (apps/runs/lease.py)
        self._overrides: dict[tuple[str, str], ModelPrice | None] = {}  # (provider, model) -> the org's price
        self._used: set[tuple[str, Any]] | None = None  # the run's usage so far, for the rollup's run counts
        # Writes gathered into the store's next transaction (see `atomic`).
        self._depth = 0
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._totals = Totals()  # what the transaction adds to the run's counters, written with its events
        self._deferred: list[Deferred] = []
        self._deferred_reads = False  # one of them returns what must read before COMMIT (a budget check)
        self._held = False  # among them, a write's completion: committed before anything slow (`commit_held`)
        self._appends: dict[str, tuple[RunStep, int, bool]] = {}  # turn -> (first index to write, rewritten?)
        self._unsaved: set[Any] = set()  # ledger rows whose insert is deferred (record_model_call)
        self._on_sent: Callable[[], None] | None = None  # for the outermost transaction's COMMIT (dispatch_call)
        self._chars: dict[str, tuple[int, int, Any]] = {}  # turn -> (messages counted, their JSON length, last)

    # --- transactions ---------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """A store transaction. Its events go out in one statement at its end (the run row's lock is
        taken there, so a step's events cost one round trip, not one each), in one batch with the messages
        its turns gained and, when it is the outermost transaction, its COMMIT. Writes `defer`red since the
        last one are written, in order, before its first statement, or, when it makes none (the usual tool
        step), first in that batch, which then carries its BEGIN too: one round trip for it all.

        What is deferred, and why that is safe: a model call that asked for tools, written by the next
        store transaction, the one that decides its first tool call (and commits its `dispatched` before the
        call leaves); a tool call's completion and its audit row, written by the transaction that saves the
        answer carrying its result to the model (after a write the engine commits it before the next model
        call), or by the next call's `dispatched`, or, after reads only, with the next model call's record.
        Nothing leaves the worker in between. A worker that dies during the model call after a write leaves
        that write's completion committed; a model call not yet recorded is made again."""
        outer, mark = self._depth == 0, len(self._events)
        # No savepoint when nested: nothing here catches an error to carry on, and a SAVEPOINT and its
        # RELEASE are two round trips each, and a step nests several store transactions.
        with transaction.atomic(savepoint=False):
            self._depth += 1
            try:
                if not outer:
                    yield
                    return
                with connection.execute_wrapper(self._deferred_first):
                    yield
                if self._deferred or self._appends or self._events or self._totals:
                    self._write_end()
            except BaseException as error:
                del self._events[mark:]
                if outer:
                    self._totals, self._on_sent = Totals(), None
                if isinstance(error, NothingUpdated):  # the deferred completion found its call not `dispatched`
                    raise LeaseLost(self.run_id) from None  # another worker made it `unknown`: the run is theirs
                raise
            finally:
                self._depth -= 1

    def _deferred_first(self, execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        """Before the transaction's first statement, the deferred writes: what it reads or changes may be theirs."""
        if self._deferred:
            self._flush_deferred()
        return execute(sql, params, many, context)

    def _write_end(self) -> None:
        """The transaction's last batch: the deferred writes when nothing went out before them (the usual tool
        step), the messages its turns gained, its events and its COMMIT. When it is all the transaction does,
        BEGIN goes with it: a tool step's writes cost one round trip (apps.core.db.end_transaction)."""
        if self._deferred_reads:  # a budget check after a model call reads: the writes go first, on their own
            self._flush_deferred()
        sent, self._on_sent = self._on_sent, None
        self._held = False
        with end_transaction(sent=sent):
            deferred, self._deferred = self._deferred, []
            if deferred:  # they come first, as if written at the start: so do their events
                body, self._events = self._events, []
                for write in deferred:
                    write()  # only sends (no afterwards: see _deferred_reads)
                self._events += body
            self._write_messages()
            events, self._events = self._events, []
            totals, self._totals = self._totals, Totals()
            published = send_events(self.run_id, events, totals)
        published()
        totals.add_to(self.run)  # as the statement did: the next step need not read the row for them

    def flush(self) -> None:
        """Writes what is deferred now (the engine calls it before handing the run back)."""
        if self._deferred or self._appends:
            with self.atomic():
                pass

    def commit_held(self) -> None:
        """Commits the completions `save_messages(hold=True)` kept back, unless a transaction already has: the engine
        calls it before it may wait (a model call, a classifier's verdict)."""
        if self._held:
            self.flush()

    def _flush_deferred(self) -> None:
        deferred, self._deferred, self._deferred_reads = self._deferred, [], False
        self._write_batch(deferred)

    @staticmethod
    def _write_batch(writes: list[Deferred]) -> None:
        """Runs deferred writes as one batch (apps.core.db.pipeline: a step's five statements in one round
        trip), then what each returned to do once the answers are in (check a row count, read)."""
        if not writes:
            return
        with pipeline():
            afterwards = [write() for write in writes]
        for then in afterwards:
            if then is not None:
                then()

    # --- the run row ----------------------------------------------------------------------------

    def _heard(self, changes: Changes) -> None:
        if changes.registry:
            self._tools.clear()
        self._run_stale |= changes.run

    def refresh(self) -> Run:
        """The run row at a step boundary (cancel, lease, status): read again, all but the snapshot and inputs
        (they never change after the run starts), unless it was just read or, while its `notices` are heard,
        nobody else changed it since. The counters this worker adds it keeps current itself (`_write_end`)."""
        if self.notices is None:  # not heard: read at every boundary but the first (the claim just read it)
            self._heard(EVERYTHING)
            self._run_stale = not self._fresh
        else:  # what was notified since the claim's read, or since the last read
            self._heard(self.notices.changes())
        if self._run_stale:
            columns, sql = run_read()
            found = fetch(sql, [columns.param("id", self.run_id)])
            if not found:
                raise Run.DoesNotExist(f"No run {self.run_id}.")
            columns.assign(self.run, found[0])
        self._fresh = self._run_stale = False
        self._live.clear()
        return self.run

    def renew_lease(self) -> None:
        """Keeps the lease at a step boundary or before a call leaves; raises LeaseLost when another worker
        took the run over.

        With a heartbeat (apps/runs/lease.py) this is the driver's sign of progress, and a write only when
        the heartbeat has not renewed in time (the database was away). Without one, no write while the run
        row last read (`refresh`, at the start of every step) shows the lease ours with more than half its
        time left: a lease only passes to another worker once expired.
        """
        beat = self.heartbeat
        if beat is not None:
            beat.touch()
            if beat.lost:
                raise LeaseLost(self.run_id)
            if beat.deadline - time.monotonic() > beat.lease / 2:
                return
        run, now = self.run, timezone.now()
        if (beat is None and self.lease_owner and run.lease_owner == self.lease_owner
                and run.status == RunStatus.RUNNING and run.lease_expires_at is not None
                and run.lease_expires_at - now > timedelta(seconds=lease_seconds() / 2)):
            return
        started = time.monotonic()
        expires = now + timedelta(seconds=lease_seconds())
        renewed = Run.objects.filter(id=self.run_id, status=RunStatus.RUNNING, lease_owner=self.lease_owner).update(
            lease_expires_at=expires)
        if not renewed:
            raise LeaseLost(self.run_id)
        run.lease_expires_at = expires
        if beat is not None:
            beat.renewed(started)

    def save_state(self, **fields: Any) -> None:
        """Updates the cursor (`state`) and counters, only while this worker holds the lease."""
        for key, value in fields.items():
            setattr(self.run, key, value)
        updated = Run.objects.filter(id=self.run_id, lease_owner=self.lease_owner).update(
            **fields, updated_at=timezone.now())
        if not updated:
            raise LeaseLost(self.run_id)

    def event(self, type: str, **data: Any) -> None:
        """Appends a run event with the store's transaction (its own when there is none)."""
        if self._depth:
            self._events.append((type, data))
            return
        with self.atomic():
            self._events.append((type, data))

    def taint(self, source: str, *, tool_call_id: str = "", tool: str = "") -> None:
        """Marks the run tainted (from now on every write and open-world read waits for a person). `source`:
        what it read, as a phrase for the holds' reasons ("the result of web.fetch (call 3f2a9c1e)")."""
        if not self.run.tainted:
            with self.atomic():
                self.save_state(tainted=True)
                self.event("run.tainted", reason=source, tool_call_id=tool_call_id, tool=tool)
            self._taint_source = source

    def untrusted_texts(self) -> list[str]:
        """The text of every untrusted result this run has read (capped), to tell which arguments were copied
        from it. Read once per store, then kept current by `read_untrusted`."""
        if getattr(self, "_untrusted", None) is None:
            self._untrusted = []
            if self.run.tainted:
                tools = self.run.snapshot.get("tools", {})
                for name, result, findings in ToolCall.objects.filter(run_id=self.run_id, result__isnull=False) \
                        .values_list("qualified_name", "result", "findings"):
                    tool = tools.get(name) or {}
                    if findings or tool.get("trust_tier") == "third_party" or tool.get("open_world"):
                        self.read_untrusted((result or {}).get("text", ""))
        return self._untrusted

    def read_untrusted(self, text: str) -> None:
        kept = self.untrusted_texts()
        if text and sum(map(len, kept)) < UNTRUSTED_KEPT:
            kept.append(text[:UNTRUSTED_KEPT])

    def read_results(self) -> list[tuple[str, str]]:
        """(qualified name, text) of every tool result this run has read, oldest first (capped like the untrusted
        texts), for the provenance checks of a write (apps.runs.engine.provenance). Asks the database only when
        called (writes), and adds the results `read_result` noted that may still wait in the store's next
        transaction; a read step pays nothing for it."""
        stored = ToolCall.objects.filter(run_id=self.run_id, result__isnull=False).order_by("created_at") \
            .values_list("id", "qualified_name", "result")
        seen, out, size = set(), [], 0
        noted = getattr(self, "_noted_results", [])
        for call_id, name, result in [*((i, n, (r or {}).get("text") or "") for i, n, r in stored), *noted]:
            if call_id in seen or not result or size >= UNTRUSTED_KEPT:
                continue
            seen.add(call_id)
            out.append((name, result[:UNTRUSTED_KEPT - size]))
            size += len(out[-1][1])
        return out

    def read_result(self, call_id: Any, name: str, text: str) -> None:
        """Notes a result just read (its completion may be deferred), for `read_results`."""
        noted = self.__dict__.setdefault("_noted_results", [])
        room = UNTRUSTED_KEPT - sum(len(t) for _, _, t in noted)
        if text and room > 0:
            noted.append((call_id, name, text[:room]))

    def taint_source(self) -> str:
        """What tainted the run (the `run.tainted` event's reason), '' when it is clean; read once per store."""
        if not self.run.tainted:
            return ""
        if getattr(self, "_taint_source", None) is None:
            event = RunEvent.objects.filter(run_id=self.run_id, type="run.tainted").order_by("seq").first()
            self._taint_source = (event.data.get("reason", "") if event else "")[:300]
        return self._taint_source

    def redact_outside(self, text: str) -> str:
        """Text from a provider or an MCP server, safe to store: the org's secrets (read now, as they are now)
        and credential shapes masked. Called only with an error in hand, so a step that went well reads
        nothing for it."""
        return redact_outside(text, org_id=self.run.org_id)

    def live_resources(self, ids: list[str]) -> dict[str, Resource]:
        """The registry's rows of these resources (with their servers), as they are now, by id: the run's
        organisation's only. Read when a task of an agent with context resources starts."""
        rows = Resource.objects.filter(org_id=self.run.org_id, id__in=ids).select_related("server")
        return {str(r.id): r for r in rows}

    def note_resource_read(self, resource_id: str, content_hash: str) -> str:
        """Keeps the hash of the content just read on the resource; returns the one the last read saw."""
        return registry_resources.note_read(resource_id=resource_id, content_hash=content_hash)

    def finish(self, status: str, *, output: str = "", error: str = "", error_class: str = "") -> None:
        """Ends the run (apps.runs.ledger.finish_run); LeaseLost when another worker took it over."""
        with self.atomic():
            run = ledger.finish_run(self.run_id, org_id=self.run.org_id, status=status, output=output, error=error,
                                    error_class=error_class, lease_owner=self.lease_owner, emit=self.event)
        if run is not None:
            self.run = run

    def wait(self, reason: str) -> bool:
        """Parks the run until people decide. Returns False (and stays running) when nothing is pending
        any more: a decision landed while this step ran.

        After BEGIN, two round trips where the ORM made five (and read the whole run, snapshot and all): the run
        row's lock and what is pending, sent together; then the park, its event and the COMMIT. What is pending
        is a statement of its own, after the lock's: a decision holds the same lock until it commits, and read
        in the lock's statement (whose snapshot is taken before it waits) the counts would miss that decision and
        park a run nobody is left to resume."""
        with self.atomic():
            run_id = Run._meta.pk.get_db_prep_value(self.run_id, connection)
            columns, lock = park_lock_read()
            locked, counts = fetch_together([(lock, [run_id]), (pending_read(), [run_id, run_id])])
            if not locked:
                raise Run.DoesNotExist(f"No run {self.run_id}.")
            owner, state = columns.values(locked[0])
            if self.lease_owner and owner != self.lease_owner:
                raise LeaseLost(self.run_id)
            pending, unknown = counts[0]
            if not pending and not unknown:
                return False
            run = self.run
            run.status, run.lease_owner, run.lease_expires_at = RunStatus.WAITING, "", None
            run.state = {**state, "waiting_since": timezone.now().isoformat()}

            def park() -> None:
                update = cursor_update(("status", "lease_owner", "lease_expires_at", "state"))
                send_expected(update.sql, update.params(
                    {"status": run.status, "lease_owner": "", "lease_expires_at": None, "state": run.state,
                     "updated_at": timezone.now()}, {"id": self.run_id, "lease_owner": owner}))

            self._deferred.append(park)  # written with the event, in the batch with the COMMIT
            self.event("run.waiting", reason=reason, approvals=pending, unknown=unknown)
            publish_status(run)
        return True

    def release(self) -> None:
        """Gives the run back to the queue (more to do; the caller enqueues the next task on commit). In one round
        trip with what the store deferred (BEGIN, the writes, the hand-back, COMMIT): every task that hands its run
        on ends with it, a resume among them. Raises LeaseLost when another worker holds the run now."""
        def hand_back() -> None:
            update = hand_back_update()
            send_expected(update.sql, update.params(
                {"status": RunStatus.QUEUED, "lease_owner": "", "lease_expires_at": None, "updated_at": timezone.now()},
                {"id": self.run_id, "lease_owner": self.lease_owner, "status": RunStatus.RUNNING}))

        with self.atomic():
            self._deferred.append(hand_back)

    # --- turns and model calls ------------------------------------------------------------------

    def turn(self, step_id: str | None) -> RunStep | None:
        if not step_id:
            return None
        if self._turn is None or str(self._turn.id) != str(step_id):
            self._turn = self._read_turn(str(step_id))
        return self._turn

    def _read_turn(self, step_id: str) -> RunStep | None:
        """The turn from the table and, in the same round trip, what a step reads of it next when this store does
        not hold it: its conversation, and its last model call's ledger rows (`last_calls`). A new task's first
        step made three round trips of them, one after the other: a resume, before the call a person let go."""
        turn, sql = turn_read()
        statements = [(sql, [turn.param("run", self.run_id), turn.param("id", step_id)])]
        with_history = step_id not in self._history
        if with_history:
            message, sql = messages_read()
            statements.append((sql, [message.param("turn", step_id)]))
            statements.append((ledger_texts_read(), [message.param("turn", step_id)]))  # what its answers cite
        with_calls = step_id not in self._last_call
        if with_calls:
            calls, _, sql = last_calls_read()
            statements.append((sql, [calls.param("step", step_id)]))
        found, *more = fetch_together(statements)
        if not found:
            return None
        if with_history:
            stored, texts = more.pop(0), {str(UUID(str(call_id))): text for call_id, text in more.pop(0)}
            payloads = as_dumped([message.values(row)[0] for row in stored], self.run_id, texts=texts)
            self._history[step_id] = (payloads, load_messages(payloads))
        if with_calls:
            self._calls_read[step_id] = more.pop(0)
        return turn.instance(found[0])

    def messages(self, turn: RunStep) -> list[ModelMessage]:
        """The turn's history, read and parsed once per store (a fresh list: callers may append). While this
        store's worker holds the lease it is the only writer of the run's conversations."""
        return list(self._conversation(turn)[1])

    def _conversation(self, turn: RunStep) -> tuple[list[dict[str, Any]], list[ModelMessage]]:
        key = str(turn.id)
        if key not in self._history:
            payloads = turn_messages(turn) or []
            self._history[key] = (payloads, load_messages(payloads))
        return self._history[key]

    def _save_messages(self, turn: RunStep, messages: list[ModelMessage]) -> None:
        """Sets the turn's history; the store's current (or next) transaction writes it at its end. When it
        only grew (the usual step) only the new messages are dumped and written (appended rows). When an earlier
        message changed, the history is replaced from the first one that differs (apps/runs/messages.py)."""
        key = str(turn.id)
        payloads, known = self._conversation(turn)
        if len(messages) >= len(known) and all(a is b for a, b in zip(known, messages, strict=False)):
            start, replace = len(known), False
            payloads = [*payloads, *dump_messages(messages[start:])]
        else:  # rewritten: the rows before the first change stay
            dumped = dump_messages(messages)
            start = next((i for i, (old, new) in enumerate(zip(payloads, dumped, strict=False)) if old != new),
                         min(len(payloads), len(dumped)))
            replace, payloads = True, [*payloads[:start], *dumped[start:]]
        self._history[key] = (payloads, list(messages))
        if key in self._appends:  # not written yet: one write from the lowest index changed
            _, before, replaced = self._appends[key]
            start, replace = min(before, start), replace or replaced
        self._appends[key] = (turn, start, replace)

    def _write_messages(self) -> None:
        """Runs in the pipeline at the end of `atomic`: writes only, no row count read."""
        appends, self._appends = self._appends, {}
        for key, (turn, start, replace) in appends.items():
            write_messages(turn, self._history[key][0][start:], start=start, replace=replace)

    def _next_position(self) -> int:
        """Called under the run row's lock, by the lease holder: the only writer of this run's steps."""
        if self._position is None:
            last = RunStep.objects.filter(run_id=self.run_id).order_by("-position").values_list("position", flat=True)
            self._position = last.first() or 0
        self._position += 1
        return self._position

    def start_turn(self, *, agent: dict[str, Any], task: str, messages: list[ModelMessage],
                   state: dict[str, Any], hop: bool = True) -> RunStep:
        """An agent's turn: its step, the run's cursor and hops, its first messages and `agent.started`, in two
        round trips: the run row's lock (with the last step's position), then every write and the COMMIT in one
        batch (`atomic`). Through the ORM, one statement at a time, it was ~6 ms of a task's start."""
        with self.atomic():
            last = fetch(run_lock_read(), [Run._meta.pk.get_db_prep_value(self.run_id, connection)])
            if self._position is None:
                self._position = (last[0][0] if last else None) or 0
            turn = RunStep(org_id=self.run.org_id, run_id=self.run_id, position=self._next_position(),
                           kind=StepKind.AGENT, agent_id=agent["id"], agent_name=agent["name"], task=task,
                           status="running", started_at=timezone.now())
            state, hops = {**state, "turn_id": str(turn.id)}, self.run.hops + (1 if hop else 0)
            self.run.state, self.run.hops = state, hops

            def write() -> None:
                step_inserts().send([turn])
                self._send_cursor(state=state, hops=hops)

            self._deferred.append(write)
            self._history[str(turn.id)] = (dump_messages(messages), list(messages))
            self._appends[str(turn.id)] = (turn, 0, False)
            self.event("agent.started", step_id=str(turn.id), agent=agent["name"], agent_id=agent["id"], task=task)
        return turn

    def save_messages(self, turn: RunStep, messages: list[ModelMessage], *, defer: bool = False, hold: bool = False,
                      **state: Any) -> None:
        """`defer`: written with the store's next transaction (see `atomic`). `hold`: the same, but no later than
        the next `commit_held`, for what must be committed before the engine waits (a write's completion)."""
        if (defer or hold) and not state:
            self._save_messages(turn, messages)
            self._held |= hold
            return
        with self.atomic():
            self._save_messages(turn, messages)
            if state:
                self.save_state(state={**self.run.state, **state})

    def history_chars(self, turn: RunStep) -> int:
        """`len(json.dumps(<the turn's stored messages>))`, counted once per message: the history grows step by
        step and dumping all of it before every model call cost time in proportion to its length."""
        messages, key = self._conversation(turn)[0], str(turn.id)
        counted, total, last = self._chars.get(key, (0, 0, None))
        if not (0 < counted <= len(messages) and messages[counted - 1] is last):  # new, or rewritten
            counted, total = 0, 0
        total += sum(len(json.dumps(m)) for m in messages[counted:])
        self._chars[key] = (len(messages), total, messages[-1] if messages else None)
        return 2 + total + 2 * max(len(messages) - 1, 0)  # "[" + ", ".join(...) + "]"

    def model_calls(self, turn: RunStep) -> int:
        """The model calls the turn has made. Asked before each of its model calls: the first time in a task, it
        also reads what that call reads once per task (`_read_before_first_call`)."""
        key = str(turn.id)
        if key not in self._calls:
            self._read_before_first_call(turn)
        return self._calls[key]

    def _read_before_first_call(self, turn: RunStep) -> None:
        """The turn's model calls so far, whether a budget counts its agent's calls and the agent's connection, in
        one round trip of prebuilt statements (reads.turn_calls_read, costs' budgets_statement,
        reads.connection_read). Each was an ORM query compiled and sent on its own, ~3 ms of a task's first step.
        `has_budgets` and `connection_spec` keep their own reads for the paths that reach them first."""
        agent = self.run.snapshot["agents"][str(turn.agent_id)]
        agent_id, connection_id = str(agent["id"]), str(agent["connection"]["id"])
        live, live_sql = connection_read()
        org = live.param("org", self.run.org_id)
        statements = [(turn_calls_read(), [RunStep._meta.pk.get_db_prep_value(turn.id, connection)])]
        if agent_id not in self._budgets:
            statements.append(costs_selectors.budgets_statement(org_id=self.run.org_id, crew_id=self.run.crew_id,
                                                                agent_ids=[agent_id]))
        if connection_id not in self._connections:
            statements.append((live_sql, [org, live.param("id", connection_id)]))
        found = iter(fetch_together(statements))
        self._calls[str(turn.id)] = next(found)[0][0]
        if agent_id not in self._budgets:
            self._budgets[agent_id] = bool(next(found))
        if connection_id not in self._connections:
            rows = next(found)
            self._connections[connection_id] = self._spec(agent["connection"], live.instance(rows[0]) if rows else None)

    def record_model_call(self, *, turn: RunStep, messages: list[ModelMessage], response: ModelResponse,
                          provider: str, model: str, latency_ms: int, calls: list[dict[str, Any]]) -> RunStep:
        """The llm step, the usage row, run totals, the new history, the proposed ledger rows: one transaction.
        When the model asked for tools it is deferred to the store's next one, the one that decides the first
        call (see `atomic`): the rows exist in memory now, with their ids."""
        usage = response.usage
        tokens_in, tokens_out, cached = usage.input_tokens or 0, usage.output_tokens or 0, usage.cache_read_tokens or 0
        text = response.text or ""
        calls_before = self.model_calls(turn)
        org_id, agent_id = self.run.org_id, turn.agent_id
        self._read_for_first_call(provider, model, calls)
        override, budgets = self._price_override(provider, model), self.has_budgets(str(agent_id))
        price = price_call(org_id=org_id, provider=provider, model=model, input_tokens=tokens_in,
                           output_tokens=tokens_out, cached_tokens=cached, override=override)
        firsts = self._first_calls(agent_id, provider, model)
        now = timezone.now()
        step = RunStep(org_id=org_id, run_id=self.run_id, parent=turn, position=self._next_position(),
                       kind=StepKind.LLM, agent_id=agent_id, agent_name=turn.agent_name, task=turn.task,
                       provider=provider, model=model, input_tokens=tokens_in, output_tokens=tokens_out,
                       cached_tokens=cached, cost_usd=price.cost_usd, price_source=price.source, latency_ms=latency_ms,
                       output=text[:4000], started_at=now - timedelta(milliseconds=latency_ms), finished_at=now)
        rows = ledger.new_calls(org_id=org_id, run_id=self.run_id, step=step, calls=calls)
        unknown = price.cost_usd is None
        totals = Totals(tokens_in=tokens_in, tokens_out=tokens_out, tokens_cached=cached, tool_calls=len(calls),
                        cost_usd=price.cost_usd or Decimal(0), cost_unknown_calls=1 if unknown else 0)

        def write() -> Callable[[], None] | None:
            # Budgets are checked after the batch: the check reads and catches an IntegrityError.
            costs.record_usage(org_id=org_id, run_id=self.run_id, crew_id=self.run.crew_id, agent_id=agent_id,
                               provider=provider, model=model, input_tokens=tokens_in, output_tokens=tokens_out,
                               cached_tokens=cached, latency_ms=latency_ms, override=override, firsts=firsts,
                               budgets=False, price=price)
            step_inserts().send([step])
            self._totals += totals
            self.event("llm.completed", step_id=str(step.id), turn_id=str(turn.id), agent=turn.agent_name,
                       model=model, provider=provider, tokens_in=tokens_in, tokens_out=tokens_out,
                       cached_tokens=cached, cost_usd=None if unknown else str(price.cost_usd),
                       latency_ms=latency_ms, tool_calls=len(calls))
            ledger.send_new_calls(rows)  # as they are now: a row dispatched meanwhile goes in dispatched
            self._unsaved.difference_update(row.id for row in rows)
            for row in rows:
                self.event("tool.requested", tool_call_id=str(row.id), step_id=str(step.id), tool=row.qualified_name,
                           args_hash=row.args_hash)
            if not budgets:
                return None
            return lambda: costs.alert_thresholds(org_id=org_id, crew_id=self.run.crew_id, agent_id=agent_id,
                                                  run_id=self.run_id)

        self._save_messages(turn, messages)
        if rows:
            self._deferred.append(write)
            self._deferred_reads |= budgets
            self._unsaved.update(row.id for row in rows)
        else:
            with self.atomic():
                self._write_batch([write])
        self._calls[str(turn.id)] = calls_before + 1
        self._last_call[str(turn.id)], self._rows[str(step.id)] = step, rows
        return step  # self.run's counters are re-read by the next step's refresh

    def finish_turn(self, turn: RunStep, *, status: str, reason: str, output: str, state: dict[str, Any]) -> None:
        """The turn's end and the run's cursor, sent with its event and the COMMIT: one round trip (as `start_turn`)."""
        with self.atomic():
            turn.status, turn.status_reason, turn.output, turn.finished_at = status, reason, output, timezone.now()
            turn.updated_at, self.run.state = turn.finished_at, state

            def write() -> None:
                turn_end_update().save(turn)
                self._send_cursor(state=state)

            self._deferred.append(write)
            self.event("agent.finished", step_id=str(turn.id), agent=turn.agent_name, task=turn.task, status=status,
                       reason=reason[:500])

    def _send_cursor(self, **fields: Any) -> None:
        """The run's cursor (`state`, `hops`) for a batch, only while this worker holds the lease: the check travels
        in the statement, and a batch that finds the lease gone rolls back whole (LeaseLost, see `atomic`)."""
        update = cursor_update(tuple(fields))
        send_expected(update.sql, update.params({**fields, "updated_at": timezone.now()},
                                                {"id": self.run_id, "lease_owner": self.lease_owner}))

    def _read_for_first_call(self, provider: str, model: str, calls: list[dict[str, Any]]) -> None:
        """What a task's first model call needs of what the store reads once per task, in one round trip: the org's
        price for the model, the run's usage so far and, when the model asked for tools, the run's decided calls
        and the granted tools' registry rows. Read one after the other where each is used, they made the task's
        first tool step ~3 ms slower than the next (bench/run.py, the p95 row). Each keeps its own read beside
        it, for the paths that come to it first (a resumed task dispatches a call before any model call)."""
        reads: list[tuple[tuple[str, list[Any]], Callable[[list[tuple]], None]]] = []
        if (provider, model) not in self._overrides:
            reads.append((override_statement(org_id=self.run.org_id, provider=provider, model=model),
                          lambda rows: self._overrides.__setitem__((provider, model), override_from(rows))))
        if self._used is None:
            reads.append((self._usage_statement(), self._take_usage))
        if calls and self._decided is None:
            reads.append((self._decided_statement(), self._take_decided))
        granted = self.run.snapshot.get("tools", {})
        for name in {call["qualified_name"] for call in calls} - set(self._tools):
            if name in granted:
                reads.append((self._live_tool_statement(name),
                              lambda rows, name=name: self._take_live_tool(name, rows)))
        if len(reads) < 2:  # one read costs the same round trip where it is used
            return
        for (_, take), rows in zip(reads, fetch_together([statement for statement, _ in reads]), strict=True):
            take(rows)

    def _price_override(self, provider: str, model: str) -> ModelPrice | None:
        """The org's price for the model, read once per store (a price set mid-run applies next task)."""
        if (provider, model) not in self._overrides:
            self._overrides[(provider, model)] = find_override(org_id=self.run.org_id, provider=provider, model=model)
        return self._overrides[(provider, model)]

    def _first_calls(self, agent_id: Any, provider: str, model: str) -> FirstCalls:
        """Whether the next usage row is the run's first (overall, for the agent, model, provider): what the
        daily rollup counts runs by. The run's earlier calls are read once per store, then tracked here."""
        if self._used is None:
            self._take_usage(fetch(*self._usage_statement()))
        keys = {"run": ("run", None), "agent": ("agent", agent_id), "provider": ("provider", provider),
                "model": ("model", model)}
        firsts = FirstCalls(**{name: key not in self._used for name, key in keys.items()})
        self._used.update(keys.values())
        return firsts

    def _usage_statement(self) -> tuple[str, list[Any]]:
        usage, sql = usage_read()
        return sql, [usage.param("org", self.run.org_id), usage.param("run_id", self.run_id)]

    def _take_usage(self, rows: list[tuple]) -> None:
        """The run's usage so far: (agent, provider, model) of its calls, none when it has made none."""
        usage, _ = usage_read()
        self._used = {("run", None)} if rows else set()
        for row in rows:
            found = dict(zip(usage.attnames, usage.values(row), strict=True))
            self._used |= {("agent", found["agent_id"]), ("provider", found["provider"]), ("model", found["model"])}

    def has_budgets(self, agent_id: str) -> bool:
        """Whether any budget counts this agent's calls (read once per store, i.e. per task: a budget
        set mid-run applies from the run's next task)."""
        if agent_id not in self._budgets:
            self._budgets[agent_id] = bool(costs_selectors.budgets_for(
                org_id=self.run.org_id, crew_id=self.run.crew_id, agent_ids=[agent_id]))
        return self._budgets[agent_id]

    def connection_spec(self, agent: dict[str, Any]) -> ConnectionSpec:
        """The agent's connection with its key decrypted now (keys never enter the snapshot)."""
        conn = agent["connection"]
        if str(conn["id"]) not in self._connections:  # once per task (a few seconds): a rotated key applies next task
            live = LlmConnection.objects.filter(org_id=self.run.org_id, id=conn["id"]).first()
            self._connections[str(conn["id"])] = self._spec(conn, live)
        return self._connections[str(conn["id"])]

    @staticmethod
    def _spec(conn: dict[str, Any], live: LlmConnection | None) -> ConnectionSpec:
        """The snapshot's connection with its base URL and key as the table holds them now (none: it was deleted)."""
        return ConnectionSpec(provider=conn["provider"], base_url=(live.base_url if live else conn["base_url"]),
                              api_key=(live.api_key if live else None))

    def run_cost(self) -> Decimal | None:
        """The run's cost as of this step's `refresh` (this worker is the only one adding to it)."""
        return self.run.cost_usd
