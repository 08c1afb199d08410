"""Answering the tool calls of one model response, through the ledger (ARCHITECTURE section 4).

Each row moves forward from whatever state the last task left it in, so a resumed run picks
up exactly where it stopped: `proposed` gets a policy decision (hold -> approval request),
`held` follows its approval, `approved` is re-checked and dispatched (`dispatched` committed
first), a `dispatched` row found here means a worker died in flight: a read is made again, any
other call becomes `unknown` and is never sent again by itself.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from django.conf import settings
from django.utils import timezone
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from apps.agents.policy import decide
from apps.agents.prompts import wrap_tool_output
from apps.core import log_context
from apps.registry.arguments import copied_from, url_problem
from apps.registry.builtin import is_builtin
from apps.registry.definitions import OUTSIDE, TRUSTED, output_trust, untrusted_output
from apps.registry.pool import PendingCall, ToolCallFailed, ToolCallTimeout, call_spec, call_tool, pool
from apps.registry.scanner import scan_text
from apps.registry.schemas import arguments_problem, input_validator
from apps.runs.engine import asking, handoff, second_opinion, server_requests
from apps.runs.engine.errors import LeaseLost, StopRun, backoff_delay
from apps.runs.engine.limits import REPEAT_LIMIT
from apps.runs.engine.model import facts
from apps.runs.engine.provenance import call_provenance
from apps.runs.engine.results import injected_call_findings, result_payload, scannable_text
from apps.runs.engine.seam import Store
from apps.runs.ledger import Decided
from apps.runs.messages import LEDGER_TEXT, LEDGER_TEXT_MIN
from apps.runs.models import ANSWERED, CallState, RunStep, ToolCall

READ_RETRIES = 2
logger = logging.getLogger(__name__)


def resolve_calls(store: Store, *, turn: RunStep, agent: dict[str, Any], rows: list[ToolCall]) -> str:
    """Moves every row of one model response forward. Returns "waiting" or "answered"."""
    waiting = False
    for row in rows:
        if row.state == CallState.PROPOSED:
            allowed = propose(store, turn=turn, agent=agent, row=row)
            if allowed is not None:
                dispatch(store, agent=agent, row=row, decided=allowed)
        if row.state == CallState.HELD:
            request = store.approval(row)
            if request is not None and request.kind == "question":  # human.ask: the answer is the result
                if request.status != "pending":
                    asking.follow_question(store, row=row, request=request)
            else:
                approved = store.follow_approval(row, write_approval=False)
                if approved is not None:
                    dispatch(store, agent=agent, row=row, decided=approved)
        if row.state == CallState.APPROVED:
            dispatch(store, agent=agent, row=row)
        if row.state == CallState.DISPATCHED:
            found_in_flight(store, agent=agent, row=row)
        if row.state in (CallState.HELD, CallState.UNKNOWN):
            waiting = True
    return "waiting" if waiting else "answered"


def found_in_flight(store: Store, *, agent: dict[str, Any], row: ToolCall) -> None:
    """A row still `dispatched` when a step starts: the worker that sent it stopped before storing its outcome.

    A read is sent again (policy checked again, as for any approved call): making it changed nothing, so
    nobody need be asked. Any other call may have happened: it becomes `unknown`, never re-sent by itself,
    and a person resolves it."""
    tool = store.run.snapshot.get("tools", {}).get(row.qualified_name)
    if tool is not None and tool.get("risk") == "read":
        if store.set_call(row, expect=CallState.DISPATCHED, state=CallState.APPROVED, event="tool.retried",
                          event_data={"reason": "in flight when its worker stopped; a read is made again"}):
            dispatch(store, agent=agent, row=row)
            return
    elif store.set_call(row, expect=CallState.DISPATCHED, state=CallState.UNKNOWN, error_class="transient",
                        error="The worker stopped after sending this call and before its result was stored. "
                              "It may or may not have happened: a person must check and resolve it.",
                        event="tool.unknown"):
        return
    row.refresh_from_db()  # the worker that sent it (its lease ran out mid-call) stored the outcome meanwhile


def propose(store: Store, *, turn: RunStep, agent: dict[str, Any], row: ToolCall) -> Decided | None:
    """Limits, schema, then the policy point with the real arguments. Denials and holds are written
    here; an allow is returned for `dispatch` to write with `dispatched`."""
    run, tools = store.run, store.run.snapshot.get("tools", {})
    crew = run.snapshot["crew"]
    if store.count_calls() >= crew.get("max_tool_calls", 50):
        raise StopRun("limit_exceeded", f"Tool call limit: the run reached its {crew.get('max_tool_calls')} "
                                        "tool calls.", "limit")
    if store.count_same_calls(row) >= REPEAT_LIMIT:
        raise StopRun("limit_exceeded", f"Loop: {row.qualified_name} was called again with the same arguments "
                                        f"({REPEAT_LIMIT} times already).", "limit")
    refusal = argument_refusal(store, row)
    if refusal is not None:
        store.decide_call(row, state=CallState.DENIED, decision="deny", rule=refusal[0], reason=refusal[1],
                          error_class="permission")
        return
    if handoff.is_own_call(run, row):  # run.get_result: read from this run's ledger, sent nowhere
        handoff.answer(store, row=row)
        return
    tool = tools.get(row.qualified_name)
    if (tool or {}).get("risk", "write") != "read":
        second_opinion.settle(store)  # a write waits for the classifier's verdicts on what the run read
    grant = next((g for g in agent.get("grants", []) if g["tool"] == row.qualified_name), None)
    live = store.live_tool(row.qualified_name) if tool else None
    known = {"provenance": call_provenance(store, tool=tool, arguments=row.arguments),
             "on_untrusted": crew.get("on_untrusted", "hold"), "taint_source": store.taint_source()}
    decision = decide(facts(tool, grant, name=row.qualified_name, arguments=row.arguments, tainted=run.tainted,
                            live=live, **known))
    standing = None
    if decision.decision == "hold" and tool:  # only a hold can be lifted by a person's standing approval
        standing = store.standing_approval(agent=agent, tool=tool, arguments=row.arguments)
        if standing is not None:
            decision = decide(facts(tool, grant, name=row.qualified_name, arguments=row.arguments,
                                    tainted=run.tainted, live=live, standing_approval=True, **known))
    if decision.decision == "deny":
        store.decide_call(row, state=CallState.DENIED, decision="deny", rule=decision.rule, reason=decision.reason,
                          error_class="permission")
        return
    problem = schema_problem(tool, row.arguments)
    if problem:
        store.decide_call(row, state=CallState.DENIED, decision="deny", rule="invalid_arguments",
                          reason=f"The arguments do not match the tool's input schema: {problem}",
                          error_class="validation")
        return
    copied = copied_from(row.arguments, store.untrusted_texts()) if run.tainted else []
    if copied:
        store.event("tool.finding", tool_call_id=str(row.id), tool=row.qualified_name, findings=[
            {"code": "copied_from_untrusted", "severity": "medium",
             "message": f"Arguments copied from the untrusted content this run read: {', '.join(copied)}."}])
    if is_builtin(tool):  # human.ask: a person answers, whether the policy allowed or held it
        asking.ask_person(store, row=row, turn=turn, tool=tool, reason=f"Waiting for a person's answer. "
                                                                        f"{decision.reason}")
        return
    if decision.decision == "hold":
        reason = decision.reason + (f" These arguments carry text copied from that content: {', '.join(copied)}."
                                    if copied else "")
        store.hold_call(row, rule=decision.rule, reason=reason, tool=tool, turn=turn)
        return
    reason = decision.reason
    if decision.rule == "standing_approval" and standing:
        reason = f"{reason} Allowed by standing approval {store.record_standing_hit(standing, row)}."
    return Decided(expect=CallState.PROPOSED, by_policy_now=True,
                   fields={"decision": "allow", "rule": decision.rule, "reason": reason, "decided_at": timezone.now()},
                   event="tool.decided", event_data={"decision": "allow", "state": CallState.APPROVED,
                                                     "rule": decision.rule, "reason": reason})


def argument_refusal(store: Store, row: ToolCall) -> tuple[str, str] | None:
    """(rule, reason) when a call is refused for its arguments or its count, before any policy: a URL to an
    address the egress rules refuse (apps.registry.arguments), or the run's limit on calls of one tool."""
    problem = url_problem(row.arguments)
    if problem:
        return "argument_egress", f"Refused by the egress rules: {problem}"
    per_tool = settings.AIRLOCK_RUN_CALLS_PER_TOOL
    if store.count_tool_calls(row.qualified_name) >= per_tool:
        return "rate_limited", (f"Rate limit: {row.qualified_name} was already called {per_tool} times in this "
                                f"run, its limit (AIRLOCK_RUN_CALLS_PER_TOOL).")
    return None


VALIDATORS_KEPT = 256
_validators: dict[str, Any] = {}  # definition hash -> a checked validator for the tool's input schema


def schema_problem(tool: dict[str, Any] | None, arguments: dict[str, Any]) -> str:
    schema = (tool or {}).get("input_schema")
    if not schema:
        return ""
    key = tool.get("definition_hash") or json.dumps(schema, sort_keys=True)  # the hash covers the schema
    if key not in _validators:  # once per definition and process
        if len(_validators) >= VALIDATORS_KEPT:
            _validators.pop(next(iter(_validators)))
        _validators[key] = input_validator(schema)
    return arguments_problem(_validators[key], arguments)


PERSON_ANSWERED = "answered"  # error_class of a held call a person answered instead of approving (ledger)


def dispatch(store: Store, *, agent: dict[str, Any], row: ToolCall, decided: Decided | None = None) -> None:
    """Commits `dispatched`, calls the tool once, stores the (capped, scanned) result.

    `decided`: how the row leaves `proposed`/`held` (see `Decided`), written with `dispatched`; without
    it the row is `approved` already. Unless the policy allowed it this very step, policy is checked
    again first: a person's approval may be old, the registry may have changed since.
    """
    run, tools = store.run, store.run.snapshot.get("tools", {})
    tool = tools.get(row.qualified_name)
    expect = decided.expect if decided else CallState.APPROVED
    before = {"fields": decided.fields, "event": decided.event, "event_data": decided.event_data} if decided else {}
    if decided is not None and decided.by_policy_now:
        early = early_read(store, tool=tool, row=row, arguments=row.effective_arguments)
        if store.dispatch_call(row, expect=expect, sent=early.start if early else None, **before):
            _dispatched(store, agent=agent, tool=tool, row=row, arguments=row.effective_arguments, early=early)
        return
    grant = next((g for g in agent.get("grants", []) if g["tool"] == row.qualified_name), None)
    arguments = row.effective_arguments
    live = store.live_tool(row.qualified_name) if tool else None
    standing = (row.rule == "standing_approval" and tool is not None
                and store.standing_approval(agent=agent, tool=tool, arguments=arguments) is not None)
    decision = decide(facts(tool, grant, name=row.qualified_name, arguments=arguments, tainted=run.tainted,
                            live=live, standing_approval=standing, taint_source=store.taint_source()))
    problem = url_problem(arguments)  # the approved arguments may have been edited by a person
    if problem:
        decision = type(decision)("deny", f"Refused by the egress rules: {problem}", "argument_egress")
    approved_by_person = row.approval_id is not None
    if live is not None and row.approval_id and live.definition_hash != (store.approval(row).definition_hash or
                                                                         live.definition_hash):
        decision = type(decision)("deny", "The tool's definition changed after the approval.", "definition_changed")
    if decision.decision == "deny" or (decision.decision == "hold" and not approved_by_person):
        reason = decision.reason if decision.decision == "deny" else f"Held at dispatch: {decision.reason}"
        store.set_call(row, expect=expect, state=CallState.DENIED, **(decided.fields if decided else {}),
                       decision="deny", rule=decision.rule, reason=f"Refused at dispatch: {reason}",
                       error_class="permission", event="tool.decided",
                       event_data={"decision": "deny", "state": "denied", "reason": reason, "at": "dispatch"})
        return
    if store.dispatch_call(row, expect=expect, **before):
        _dispatched(store, agent=agent, tool=tool, row=row, arguments=arguments)


class EarlyRead:
    """A read whose request leaves as the commit of its `dispatched` goes out, without waiting for that
    commit's answer: the tool's round trip and the database's overlap (a tool step's two waits become one).

    Only reads. Should that commit fail after the request left (another worker took the run over, the
    database went away), a read was made that the ledger does not show, which changes nothing: reads have
    no effects to count, and the engine makes a failed read again by itself (READ_RETRIES). Anything else
    keeps the order of ARCHITECTURE section 4: its request leaves once `dispatched` is committed."""

    def __init__(self, spec: Any, name: str, arguments: dict[str, Any]) -> None:
        self.spec, self.name, self.arguments = spec, name, arguments
        self.pending: PendingCall | None = None

    def start(self) -> None:
        """Called from inside the batch (apps.core.db.end_transaction): must not raise. A call that could not
        start is made the usual way once the commit is in."""
        try:
            self.pending = pool.start_call(self.spec, self.name, self.arguments, float(self.spec.timeout_s))
        except Exception:
            logger.exception("starting %s early failed; it is made after the commit", self.name)


def early_read(store: Store, *, tool: dict[str, Any] | None, row: ToolCall,
               arguments: dict[str, Any]) -> EarlyRead | None:
    """An `EarlyRead` for a call of a read tool whose server is known and enabled, else None (the usual call
    then reports what is wrong). Reads what the call needs now: nothing may be read inside the batch."""
    if tool is None or tool.get("risk") != "read":
        return None
    live = store.live_tool(row.qualified_name)
    if live is not None and server_requests.may_ask(live.server):  # its call needs a session of its own
        return None
    try:
        spec = call_spec(tool["server_id"], org_id=store.run.org_id, server=live.server if live is not None else None)
    except Exception:
        return None
    store.renew_lease()  # before the batch, not after it as for other calls: the request leaves inside it
    return EarlyRead(spec, tool["name"], arguments)


def _dispatched(store: Store, *, agent: dict[str, Any], tool: dict[str, Any] | None, row: ToolCall,
                arguments: dict[str, Any], early: EarlyRead | None = None) -> None:
    """The call, once `dispatched` is committed (or, for an early read, as it was), and its outcome with its
    audit row (committed before the next model call: apps.runs.engine.loop)."""
    if early is None or early.pending is None:
        store.renew_lease()
    outcome = _call(store, tool=tool, row=row, arguments=arguments, agent=agent,
                    pending=early.pending if early is not None else None)
    # Each transition below fails only when the row left `dispatched` meanwhile: this worker's lease ran
    # out during the call and another one took the run over (and made the row `unknown`). A deferred
    # completion raises LeaseLost when it is written (RunStore.atomic).
    if outcome is None:  # a write that timed out: it may have happened
        with store.atomic():
            if not store.set_call(row, expect=CallState.DISPATCHED, state=CallState.UNKNOWN, error_class="transient",
                                  error="No answer in time; the call may or may not have happened. A person must "
                                        "check.", event="tool.unknown"):
                raise LeaseLost(store.run_id)
            store.audit_call(row, agent=agent, tool=tool)
        return
    result, error = outcome
    if result is None:
        store.complete_call(row, state=CallState.FAILED, result=None, error=error, error_class="transient", defer=True)
        store.audit_call(row, agent=agent, tool=tool)
        return
    payload = result_payload(result)
    scanned = scannable_text(payload)
    findings = [f.as_dict() for f in scan_text(scanned, where=f"result of {row.qualified_name}")]
    findings += injected_call_findings(scanned, where=f"result of {row.qualified_name}")
    store.complete_call(row, state=CallState.FAILED if result.is_error else CallState.SUCCEEDED, result=payload,
                        error=payload["text"] if result.is_error else "",  # redacted, then cut, by the store
                        error_class="business" if result.is_error else "", findings=findings, defer=True)
    store.audit_call(row, agent=agent, tool=tool)
    store.read_result(row.id, row.qualified_name, payload.get("text", ""))
    if findings:
        store.event("tool.finding", tool_call_id=str(row.id), tool=row.qualified_name,
                    findings=[{"code": f["code"], "severity": f["severity"], "message": f["message"]}
                              for f in findings])
    source = taint_by(store, tool=tool, row=row, flagged=any(f["severity"] != "low" for f in findings))
    if source:
        store.read_untrusted(payload.get("text", ""))
        store.taint(source, tool_call_id=str(row.id), tool=row.qualified_name)
    elif not _trusted(store, tool=tool, row=row):
        second_opinion.hand_over(store, row=row, text=scanned)


def _trust(store: Store, *, tool: dict[str, Any] | None, row: ToolCall) -> str:
    """What admins say of this tool's results now ("outside", "trusted" or ""): the live rows, so a mark set
    while the run is under way applies to its next result; the run's snapshot when the tool is gone."""
    live = store.live_tool(row.qualified_name) if tool else None
    if live is not None:
        return output_trust(live, live.server)
    return (tool or {}).get("output_trust", TRUSTED if (tool or {}).get("trusted_output") else "")


def _trusted(store: Store, *, tool: dict[str, Any] | None, row: ToolCall) -> bool:
    """An admin marked the tool's (or its server's) output trusted: no second opinion is asked for it."""
    return _trust(store, tool=tool, row=row) == TRUSTED


def taint_by(store: Store, *, tool: dict[str, Any] | None, row: ToolCall, flagged: bool) -> str:
    """Why this result taints the run ('' when it does not): flagged by the scanner, or read from content
    Airlock does not control (a third-party server, an open-world tool, a tool an admin marked outside content),
    unless an admin trusts its output. Provenance is the first line: an injection the scanner misses still
    taints the run."""
    call = f"the result of {row.qualified_name} (call {str(row.id)[:8]})"
    if flagged:
        return f"{call} looks like it carries instructions"
    if tool is None:
        return ""
    trust = _trust(store, tool=tool, row=row)
    if not untrusted_output(tier=tool.get("trust_tier", ""), open_world=bool(tool.get("open_world")), trust=trust):
        return ""
    if trust == OUTSIDE:
        return f"{call} is outside content (an admin marked it so)"
    return f"{call} is content Airlock does not control"


def _call(store: Store, *, tool: dict[str, Any] | None, row: ToolCall, arguments: dict[str, Any],
          agent: dict[str, Any] | None = None, pending: PendingCall | None = None):
    """(result, "") or (None, error); None when a non-read call timed out (outcome unknown). `pending`: the
    first attempt, already sent (`EarlyRead`). Log lines written meanwhile carry the call's id."""
    with log_context.bind(tool_call_id=row.id):
        return _call_tool(store, tool=tool, row=row, arguments=arguments, agent=agent, pending=pending)


def _call_tool(store: Store, *, tool: dict[str, Any] | None, row: ToolCall, arguments: dict[str, Any],
               agent: dict[str, Any] | None, pending: PendingCall | None):
    if tool is None:
        return None, f"{row.qualified_name} is not a known tool."
    attempts = READ_RETRIES + 1 if tool.get("risk") == "read" else 1
    for attempt in range(1, attempts + 1):
        try:
            if pending is not None and attempt == 1:
                return pending.result(), ""
            live = store.live_tool(row.qualified_name)
            if live is not None and agent is not None and server_requests.may_ask(live.server):
                return server_requests.hosted_call(store, row=row, tool=tool, agent=agent, server=live.server,
                                                   arguments=arguments), ""
            return call_tool(tool["server_id"], tool["name"], arguments, org_id=store.run.org_id,
                             server=live.server if live is not None else None), ""
        except ToolCallTimeout as exc:
            if tool.get("risk") != "read":
                return None
            error = str(exc)
        except ToolCallFailed as exc:
            error = str(exc)
        except Exception as exc:  # NotFound (server deleted) and the like
            return None, str(exc)
        if attempt < attempts:
            delay = backoff_delay(attempt)
            store.event("retry", what="tool", tool=row.qualified_name, attempt=attempt, delay_s=round(delay, 2),
                        error=store.redact_outside(error)[:300])
            time.sleep(delay)
    return None, error


def made_writes(tools: dict[str, Any], rows: list[ToolCall]) -> bool:
    """Whether any of `rows` was sent to a tool that changes something (risk other than `read`)."""
    return any(row.dispatched_at is not None and (tools.get(row.qualified_name) or {}).get("risk") != "read"
               for row in rows)


def answers(rows: list[ToolCall]) -> ModelRequest:
    """The next request: one tool return per call of the response, in order."""
    parts = []
    for row in rows:
        assert row.state in ANSWERED, row.state
        content = answer_text(row)
        parts.append(ToolReturnPart(tool_name=row.model_tool_name, tool_call_id=row.call_id, content=content,
                                    outcome=_outcome(row), metadata=ledger_text_at(row, content)))
    return ModelRequest(parts=parts)


def ledger_text_at(row: ToolCall, content: str) -> dict[str, Any] | None:
    """Where the ledger row's result text sits in the answer the model gets, when it is there whole and long
    enough to matter: the conversation is then stored without it (apps/runs/messages.py), not a second copy
    of every tool result. Metadata is the application's: pydantic-ai never sends it to the model."""
    text = (row.result or {}).get("text") or ""
    at = content.find(text) if len(text) >= LEDGER_TEXT_MIN else -1
    return {LEDGER_TEXT: {"call": str(row.id), "run": str(row.run_id), "at": at, "length": len(text)}} \
        if at >= 0 else None


def _outcome(row: ToolCall) -> str:
    if row.state in (CallState.DENIED, CallState.REJECTED, CallState.EXPIRED):
        return "denied"
    return "failed" if row.state == CallState.FAILED else "success"


def answer_text(row: ToolCall) -> str:
    if row.error_class == PERSON_ANSWERED and row.result is not None:
        return (f"NOT RUN. A person ({row.result.get('person', '')}) answered instead of the tool; these are their "
                f"words, not the tool's:\n{row.result.get('text', '')}")
    if row.state in (CallState.DENIED, CallState.REJECTED, CallState.EXPIRED):
        return f"DENIED: {row.reason}"
    if row.result is not None:
        if (answered := asking.answer_text(row)) is not None:
            return answered
        text = row.result.get("text", "")
        prefix = "ERROR from the tool:\n" if row.result.get("is_error") else ""
        return prefix + wrap_tool_output(tool=row.qualified_name, text=text)
    return f"ERROR: the call failed: {row.error or 'no result'}"


def describe(rows: list[ToolCall]) -> str:
    return json.dumps([{"tool": r.qualified_name, "state": r.state} for r in rows])
