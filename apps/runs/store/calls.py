"""The store's tool-call methods: a mixin of `RunStore`, whose state it uses (`run`, `_rows`, `_live`,
`_unsaved`, `_decided`, the transaction of `atomic`). Every state change they make is a call into the run
ledger (apps/runs/ledger.py) with the store's `event` as its `emit`; what stays here is what one worker
may keep in memory while it holds the lease (the rows, counts, approvals and registry rows it read)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection
from django.utils import timezone

from apps.approvals import standing
from apps.approvals.models import ApprovalRequest
from apps.audit import services as audit
from apps.core import tracing
from apps.core.metrics import observe_tool_call
from apps.core.rows import fetch
from apps.registry.models import Tool
from apps.runs import ledger
from apps.runs.ledger import Decided
from apps.runs.models import CallState, RunStep, ToolCall
from apps.runs.store.reads import decided_read, evidence_read, last_calls_read, live_tool_read

AUDIT_ARGUMENTS_CAP = 4000  # characters of a call's arguments kept in its audit row (its args_hash is whole)


@dataclass(frozen=True)
class AgentActor:
    """Who acts in an engine tool call's audit row: the agent (apps.audit.services.AuditActor)."""

    label: str
    user_id: int | None = None
    token_id: None = None
    ip: None = None


class ToolCalls:
    def last_calls(self, turn: RunStep) -> list[ToolCall]:
        """The ledger rows of the turn's last model call: as this store created them (set_call keeps them
        current), or, in a new task, from the table in one query (with their approvals)."""
        step = self._last_call.get(str(turn.id))
        if step is not None:
            return list(self._rows[str(step.id)])
        read = self._calls_read.pop(str(turn.id), None)  # read with the turn (RunStore.turn), once
        if read is None:
            calls, _, sql = last_calls_read()
            read = fetch(sql, [calls.param("step", turn.id)])
        return self._ledger_rows(read)

    def _ledger_rows(self, found: list[tuple]) -> list[ToolCall]:
        """`last_calls_read`'s rows as ledger rows, each with its approval."""
        calls, requests, _ = last_calls_read()
        rows = []
        for values in found:
            row = calls.instance(values[:len(calls)])
            if row.approval_id:  # read this step: `approval()` needs not read it again before the next refresh
                row.approval = self._live[f"approval:{row.approval_id}"] = requests.instance(values[len(calls):])
            rows.append(row)
        return rows

    def evidence(self, turn: RunStep) -> list[dict[str, Any]]:
        """The tool calls of a finished turn that returned a result, in order: {"id", "tool", "chars"} (a
        `run.get_result` call stands for the call it read). One query, when the turn hands on its conclusion."""
        self.flush()  # a completion still deferred is part of the turn
        meta = ToolCall._meta
        keys = [meta.get_field(name).get_db_prep_value(value, connection)
                for name, value in (("org", self.run.org_id), ("run", self.run_id), ("step", turn.id))]
        rows = fetch(evidence_read(), keys)
        out, seen = [], set()
        for call_id, name, chars, of_call, read_tool in rows:
            key = of_call or str(UUID(str(call_id)))  # SQLite hands back the id as 32 hex digits
            if key not in seen:
                seen.add(key)
                out.append({"id": key, "tool": read_tool if of_call else name, "chars": chars or 0})
        return out

    def run_result(self, call_id: str) -> tuple[str, dict[str, Any]] | None:
        """(tool, result) of a call of this run that succeeded, by its id; None for any other id (another run's,
        another organisation's, one that failed, not an id)."""
        try:
            UUID(call_id)
        except ValueError:
            return None
        self.flush()  # the call may have completed in this very step
        return (ToolCall.objects.filter(org_id=self.run.org_id, run_id=self.run_id, id=call_id,
                                        state=CallState.SUCCEEDED, result__isnull=False)
                .values_list("qualified_name", "result").first())

    def _decided_calls(self) -> Counter[tuple[str, str]]:
        """Read once per store; then `set_call` counts each row leaving `proposed` (this worker is the
        only one deciding this run's calls while it holds the lease)."""
        if self._decided is None:
            self._take_decided(fetch(*self._decided_statement()))
        return self._decided

    def _decided_statement(self) -> tuple[str, list[Any]]:
        calls, sql = decided_read()
        return sql, [calls.param("run", self.run_id), CallState.PROPOSED]

    def _take_decided(self, rows: list[tuple]) -> None:
        calls, _ = decided_read()
        self._decided = Counter((found["qualified_name"], found["args_hash"])
                                for found in (dict(zip(calls.attnames, calls.values(row), strict=True))
                                              for row in rows))

    def count_calls(self) -> int:
        return sum(self._decided_calls().values())

    def count_tool_calls(self, qualified_name: str) -> int:
        """Earlier calls of this run of one tool, whatever their arguments."""
        return sum(n for (name, _), n in self._decided_calls().items() if name == qualified_name)

    def count_same_calls(self, row: ToolCall) -> int:
        """Earlier calls of this run with the same tool and argument hash (`row` itself is still proposed)."""
        return self._decided_calls()[(row.qualified_name, row.args_hash)]

    def set_call(self, row: ToolCall, *, expect: str, event: str | None = None, event_data: dict | None = None,
                 **fields: Any) -> bool:
        """A conditional ledger transition (state `expect` -> fields['state']); False when it was not in `expect`."""
        with self.atomic():
            return self._transition(row, expect=expect, event=event, event_data=event_data, **fields)

    def _transition(self, row: ToolCall, *, expect: str, event: str | None, event_data: dict | None,
                    **fields: Any) -> bool:
        if not ledger.move_call(self.run, row, expect=expect, emit=self.event, event=event, event_data=event_data,
                                **fields):
            return False
        self._count_decided(row, expect=expect)
        return True

    def _applied(self, row: ToolCall, *, expect: str, event: str | None, event_data: dict | None,
                 fields: dict[str, Any]) -> None:
        """What follows a ledger transition written in a batch: the store's count, then the ledger's part."""
        self._count_decided(row, expect=expect)
        ledger.applied(self.run, row, fields=fields, emit=self.event, event=event, event_data=event_data)

    def _count_decided(self, row: ToolCall, *, expect: str) -> None:
        if expect == CallState.PROPOSED and self._decided is not None:
            self._decided[(row.qualified_name, row.args_hash)] += 1

    def audit_call(self, row: ToolCall, *, agent: dict[str, Any], tool: dict[str, Any] | None) -> None:
        """The audit row of a call the engine made, as its outcome is written: the agent, the credential it
        ran with (its MCP server's), the tool, the arguments sent (redacted by audit), the result's state.
        Written with the store's transaction in progress, else with its next one: it only sends statements
        (apps.audit.services.send_record), so it adds no round trip and no commit to a tool step."""
        arguments = row.effective_arguments
        text = json.dumps(arguments, ensure_ascii=False, default=str)
        kept = arguments if len(text) <= AUDIT_ARGUMENTS_CAP else {"truncated": text[:AUDIT_ARGUMENTS_CAP]}
        data = {"run_id": self.run_id, "crew": self.run.crew_name, "agent_id": str(agent.get("id", "")),
                "principal": f"mcp_server:{(tool or {}).get('server', '')}", "tool": row.qualified_name,
                "arguments": kept, "args_hash": row.args_hash, "state": row.state, "error_class": row.error_class,
                "approval_id": str(row.approval_id) if row.approval_id else None}

        def write() -> None:
            audit.send_record(org_id=self.run.org_id, actor=AgentActor(f"agent:{agent.get('name', '')}"),
                              action="run.tool_call", target=row, target_label=row.qualified_name, data=data)

        if self._depth:
            write()
        else:
            self._deferred.append(write)

    def decide_call(self, row: ToolCall, *, state: str, decision: str, rule: str, reason: str,
                    error_class: str = "") -> None:
        self.set_call(row, expect=CallState.PROPOSED, **ledger.decision_fields(
            state=state, decision=decision, rule=rule, reason=reason, error_class=error_class))

    def hold_call(self, row: ToolCall, *, rule: str, reason: str, tool: dict[str, Any] | None, turn: RunStep,
                  required_approvals: int = 1) -> ApprovalRequest:
        """`proposed -> held` and an approval request, in one transaction of three round trips where it made five:
        BEGIN; what the store deferred, then the request's INSERT with the read of who hears of it; the row's move
        with the step's events and the COMMIT. The move is the batch's expected update: a row no longer `proposed`
        was moved by another worker that took the run over (only the run's engine moves it), and the batch rolls
        back (LeaseLost)."""
        with self.atomic():
            request = ledger.hold_request(self.run, row, rule=rule, reason=reason, tool=tool, turn=turn,
                                          required_approvals=required_approvals, batch=True)
            fields, event_data = ledger.hold_fields(request, rule=rule, reason=reason)
            self._deferred.append(lambda: ledger.send_move(row, expect=CallState.PROPOSED, fields=fields))
            ledger.applied(self.run, row, fields=fields, emit=self.event, event="tool.decided", event_data=event_data)
            ledger.requested(row, request, reason=reason, emit=self.event)
            self._count_decided(row, expect=CallState.PROPOSED)
        # As it was just written: the step then asks whether it is decided already (`approval`), and a decision
        # that lands meanwhile is seen by the park's count after the run's lock (RunStore.wait) and the next step.
        self._live[f"approval:{request.id}"] = request
        tracing.record("tool.held", start=request.created_at, end=request.created_at, tool=row.qualified_name,
                       rule=rule, tool_call_id=row.id, approval_id=request.id)
        return request

    def follow_approval(self, row: ToolCall, *, write_approval: bool = True) -> Decided | None:
        """A held row follows its decided approval (apps.runs.ledger.approval_outcome). `write_approval=False`
        (the engine, about to dispatch): an approval is returned, with the approved arguments set on the row in
        memory, for `dispatch_call` to write with `dispatched`."""
        outcome = ledger.approval_outcome(row, self.approval(row))
        if outcome is None:
            return None
        if "state" not in outcome.fields and not write_approval:  # written with `dispatched` by dispatch_call
            row.approved_arguments = outcome.fields["approved_arguments"]
            return outcome
        self.set_call(row, expect=outcome.expect, event=outcome.event, event_data=outcome.event_data,
                      **{"state": CallState.APPROVED, **outcome.fields})
        return None

    def standing_approval(self, *, agent: dict[str, Any], tool: dict[str, Any] | None,
                          arguments: dict[str, Any] | None) -> str | None:
        """The id of a person's standing approval covering this call (policy input), or None."""
        crew = self.run.snapshot.get("crew", {})
        match = standing.matching_standing(
            org_id=self.run.org_id, run_id=self.run_id, agent_id=agent.get("id"), tool_id=(tool or {}).get("id"),
            risk=(tool or {}).get("risk", ""), arguments=arguments,
            required_approvals=int(crew.get("approvals_required") or 1),
            not_by_user_id=self.run.started_by_id if crew.get("separation_of_duties") else None)
        return str(match.id) if match else None

    def record_standing_hit(self, standing_id: str, row: ToolCall) -> str:
        """Counts the hit; returns the standing approval's label for the call's reason."""
        return standing.record_hit(standing_id=standing_id, run_id=self.run_id, tool_call_id=row.id)

    def approval(self, row: ToolCall) -> ApprovalRequest | None:
        """The row's approval request, read once per step (following it and dispatching read the same)."""
        if not row.approval_id:
            return None
        key = f"approval:{row.approval_id}"
        if key not in self._live:
            self._live[key] = ApprovalRequest.objects.filter(id=row.approval_id).first()
        return self._live[key]

    def complete_call(self, row: ToolCall, *, state: str, result: dict[str, Any] | None, error: str = "",
                      error_class: str = "", findings: list[dict[str, Any]] | None = None,
                      defer: bool = False) -> bool:
        """`dispatched -> state`. False when the row is no longer `dispatched` (another worker found it in
        flight and made it `unknown`). `defer`: written with the store's next transaction (see `atomic`),
        which raises LeaseLost in that case; the row in memory changes now. The ledger redacts an error
        and an error result (they came from the server) first."""
        fields, event_data = ledger.completion(self.run.org_id, state=state, result=result, error=error,
                                               error_class=error_class, findings=findings)
        observe_tool_call(state=state, source="run", dispatched_at=row.dispatched_at, finished_at=fields["finished_at"])
        tracing.record("tool.call", start=row.dispatched_at, end=fields["finished_at"], tool=row.qualified_name,
                       state=state, tool_call_id=row.id, findings=len(findings or []))
        if not defer:
            return self.set_call(row, expect=CallState.DISPATCHED, event="tool.completed", event_data=event_data,
                                 **fields)

        def write() -> None:
            ledger.send_completion(row, fields)  # the store raises LeaseLost on its NothingUpdated
            # Its event now, in order with the batch's others; LeaseLost rolls them all back.
            self._applied(row, expect=CallState.DISPATCHED, event="tool.completed", event_data=event_data,
                          fields=fields)

        self._deferred.append(write)
        for key, value in fields.items():
            setattr(row, key, value)
        return True

    def dispatch_call(self, row: ToolCall, *, expect: str, fields: dict[str, Any] | None = None,
                      event: str | None = None, event_data: dict[str, Any] | None = None,
                      sent: Callable[[], None] | None = None) -> bool:
        """`expect -> dispatched`, committed before the request leaves. `fields`/`event`: the decision that
        lets the row out of `proposed` or `held` (the policy's allow, a person's approval), in the same
        commit: nobody waits on an `approved` row in between. False when the row was not in `expect`.

        `sent` (reads only, see apps.runs.engine.tools.dispatch): called once the batch with that commit has
        gone out, before its answer is waited for (apps.core.db.end_transaction), when this is the outermost
        transaction and its batch carries the COMMIT; not called otherwise."""
        outermost = self._depth == 0
        changes = {**(fields or {}), "state": CallState.DISPATCHED, "dispatched_at": timezone.now(),
                   "attempts": row.attempts + 1}
        # The usual step: the model call that asked for it is still unwritten, so the row is inserted by the
        # transaction below (its deferred writes come first) already `dispatched`: no UPDATE.
        inserting = row.id in self._unsaved
        if inserting:
            if row.state != expect:
                return False
            for key, value in changes.items():
                setattr(row, key, value)
        with self.atomic():
            if inserting:
                self._applied(row, expect=expect, event=event, event_data=event_data, fields=changes)
            elif outermost:
                # A row written before (a call a person let go, a response's second call): its move goes out in
                # the batch with the COMMIT, not a round trip before it. Only the run's engine moves these rows, so
                # one that left `expect` meanwhile means another worker took the run over (and moved it itself):
                # the batch rolls back, the store raises LeaseLost, and this worker's request never leaves.
                self._deferred.append(lambda: ledger.send_move(row, expect=expect, fields=changes))
                self._applied(row, expect=expect, event=event, event_data=event_data, fields=changes)
            elif not self._transition(row, expect=expect, event=event, event_data=event_data, **changes):
                return False
            self.event("tool.dispatched", tool_call_id=str(row.id), tool=row.qualified_name)
            if sent is not None and outermost:
                self._on_sent = sent
        return True

    def live_tool(self, qualified_name: str) -> Tool | None:
        """The registry's row now (with its server): read once per step, or, while the store's `notices` are
        heard, once until a change in the org's registry is notified. The policy at proposal and the re-check
        at dispatch a moment later see the same state."""
        if self.notices is not None:
            self._heard(self.notices.changes())
        if qualified_name not in self._tools:
            # Only what the policy and the call need: the rows' schemas, definitions and encrypted secrets
            # cost more to load than the query (the pool decrypts a server's secrets once per change).
            sql, params = self._live_tool_statement(qualified_name)
            self._take_live_tool(qualified_name, fetch(sql, params))
        return self._tools[qualified_name]

    def _live_tool_statement(self, qualified_name: str) -> tuple[str, list[Any]]:
        tool, _, sql = live_tool_read()
        return sql, [tool.param("org", self.run.org_id), qualified_name]

    def _take_live_tool(self, qualified_name: str, rows: list[tuple]) -> None:
        tool, server, _ = live_tool_read()
        live = None
        for row in rows:  # one at most
            live = tool.instance(row[:len(tool)])
            live.server = server.instance(row[len(tool):])
        self._tools[qualified_name] = live

