"""Answering the tool calls of one model response, through the ledger (ARCHITECTURE section 4).

Each row moves forward from whatever state the last task left it in, so a resumed run picks
up exactly where it stopped: `proposed` gets a policy decision (hold -> approval request),
`held` follows its approval, `approved` is re-checked and dispatched (`dispatched` committed
first), a `dispatched` row found here means a worker died in flight: it becomes `unknown` and
is never sent again by itself.
"""

from __future__ import annotations

import json
import time
from typing import Any

import jsonschema
from django.utils import timezone
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from apps.agents.policy import decide
from apps.agents.prompts import wrap_tool_output
from apps.registry.pool import ToolCallFailed, ToolCallTimeout, call_tool
from apps.registry.scanner import scan_text
from apps.runs.engine.errors import LeaseLost, StopRun, backoff_delay
from apps.runs.engine.hashing import args_hash
from apps.runs.engine.limits import REPEAT_LIMIT
from apps.runs.engine.model import facts
from apps.runs.engine.results import injected_call_findings, result_payload
from apps.runs.models import ANSWERED, CallState

READ_RETRIES = 2


def resolve_calls(store: Any, *, turn: Any, agent: dict[str, Any], rows: list[Any]) -> str:
    """Moves every row of one model response forward. Returns "waiting" or "answered"."""
    waiting = False
    for row in rows:
        if row.state == CallState.PROPOSED:
            propose(store, turn=turn, agent=agent, row=row)
        if row.state == CallState.HELD:
            follow_approval(store, row=row)
        if row.state == CallState.APPROVED:
            dispatch(store, agent=agent, row=row)
        if row.state == CallState.DISPATCHED and not store.set_call(
                row, expect=CallState.DISPATCHED, state=CallState.UNKNOWN, error_class="transient",
                error="The worker stopped after sending this call and before its result was stored. "
                      "It may or may not have happened: a person must check and resolve it.", event="tool.unknown"):
            row.refresh_from_db()  # the worker that sent it (its lease ran out mid-call) stored the outcome meanwhile
        if row.state in (CallState.HELD, CallState.UNKNOWN):
            waiting = True
    return "waiting" if waiting else "answered"


def propose(store: Any, *, turn: Any, agent: dict[str, Any], row: Any) -> None:
    """Limits, schema, then the policy point with the real arguments."""
    run, tools = store.run, store.run.snapshot.get("tools", {})
    crew = run.snapshot["crew"]
    if store.count_calls() >= crew.get("max_tool_calls", 50):
        raise StopRun("limit_exceeded", f"Tool call limit: the run reached its {crew.get('max_tool_calls')} "
                                        "tool calls.", "limit")
    if store.count_same_calls(row) >= REPEAT_LIMIT:
        raise StopRun("limit_exceeded", f"Loop: {row.qualified_name} was called again with the same arguments "
                                        f"({REPEAT_LIMIT} times already).", "limit")
    tool = tools.get(row.qualified_name)
    grant = next((g for g in agent.get("grants", []) if g["tool"] == row.qualified_name), None)
    standing = store.standing_approval(agent=agent, tool=tool, arguments=row.arguments) if tool else None
    decision = decide(facts(tool, grant, name=row.qualified_name, arguments=row.arguments, tainted=run.tainted,
                            live=store.live_tool(row.qualified_name) if tool else None,
                            standing_approval=standing is not None))
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
    if decision.decision == "hold":
        store.hold_call(row, rule=decision.rule, reason=decision.reason, tool=tool, turn=turn)
        return
    reason = decision.reason
    if decision.rule == "standing_approval" and standing:
        reason = f"{reason} Allowed by standing approval {store.record_standing_hit(standing, row)}."
    store.decide_call(row, state=CallState.APPROVED, decision="allow", rule=decision.rule, reason=reason)


def schema_problem(tool: dict[str, Any] | None, arguments: dict[str, Any]) -> str:
    schema = (tool or {}).get("input_schema")
    if not schema:
        return ""
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return f"{where + ': ' if where else ''}{exc.message}"
    except jsonschema.SchemaError:
        return ""
    return ""


def follow_approval(store: Any, *, row: Any) -> None:
    """A decided approval moves a held row to approved (with the approved arguments) or rejected/expired."""
    request = store.approval(row)
    if request is None or request.status == "pending":
        return
    if request.status == "approved":
        approved = request.approved_arguments if request.approved_arguments is not None else request.arguments
        if request.args_hash != row.args_hash or (request.approved_args_hash and
                                                  request.approved_args_hash != args_hash(approved)):
            store.set_call(row, expect=CallState.HELD, state=CallState.REJECTED, error_class="permission",
                           reason="The approval does not match these arguments, so the call was not made.",
                           event="tool.decided", event_data={"decision": "deny", "state": "rejected"})
            return
        store.set_call(row, expect=CallState.HELD, state=CallState.APPROVED, approved_arguments=approved,
                       event="approval.applied", event_data={"edited": approved != row.arguments,
                                                            "by": request.decided_by_label})
        return
    comment = request.comment.strip()
    reason = (f"A person ({request.decided_by_label}) rejected this call" + (f": {comment}" if comment else ".")
              if request.status == "rejected" else "Nobody approved this call in time; it expired (rejected).")
    state = CallState.REJECTED if request.status == "rejected" else CallState.EXPIRED
    store.set_call(row, expect=CallState.HELD, state=state, reason=reason, error_class="permission",
                   event="tool.decided", event_data={"decision": "deny", "state": state, "reason": reason})


def dispatch(store: Any, *, agent: dict[str, Any], row: Any) -> None:
    """Re-checks policy, commits `dispatched`, calls the tool once, stores the (capped, scanned) result."""
    run, tools = store.run, store.run.snapshot.get("tools", {})
    tool = tools.get(row.qualified_name)
    grant = next((g for g in agent.get("grants", []) if g["tool"] == row.qualified_name), None)
    arguments = row.effective_arguments
    live = store.live_tool(row.qualified_name) if tool else None
    standing = (row.rule == "standing_approval" and tool is not None
                and store.standing_approval(agent=agent, tool=tool, arguments=arguments) is not None)
    decision = decide(facts(tool, grant, name=row.qualified_name, arguments=arguments, tainted=run.tainted,
                            live=live, standing_approval=standing))
    approved_by_person = row.approval_id is not None
    if live is not None and row.approval_id and live.definition_hash != (store.approval(row).definition_hash or
                                                                         live.definition_hash):
        decision = type(decision)("deny", "The tool's definition changed after the approval.", "definition_changed")
    if decision.decision == "deny" or (decision.decision == "hold" and not approved_by_person):
        reason = decision.reason if decision.decision == "deny" else f"Held at dispatch: {decision.reason}"
        store.set_call(row, expect=CallState.APPROVED, state=CallState.DENIED, decision="deny", rule=decision.rule,
                       reason=f"Refused at dispatch: {reason}", error_class="permission", event="tool.decided",
                       event_data={"decision": "deny", "state": "denied", "reason": reason, "at": "dispatch"})
        return
    if not store.set_call(row, expect=CallState.APPROVED, state=CallState.DISPATCHED, dispatched_at=timezone.now(),
                          attempts=row.attempts + 1, event="tool.dispatched"):
        return
    store.renew_lease()
    outcome = _call(store, tool=tool, row=row, arguments=arguments)
    # Each transition below fails only when the row left `dispatched` meanwhile: this worker's lease ran
    # out during the call and another one took the run over (and made the row `unknown`).
    if outcome is None:  # a write that timed out: it may have happened
        if not store.set_call(row, expect=CallState.DISPATCHED, state=CallState.UNKNOWN, error_class="transient",
                              error="No answer in time; the call may or may not have happened. A person must "
                                    "check.", event="tool.unknown"):
            raise LeaseLost(store.run_id)
        return
    result, error = outcome
    if result is None:
        if not store.complete_call(row, state=CallState.FAILED, result=None, error=error, error_class="transient"):
            raise LeaseLost(store.run_id)
        return
    payload = result_payload(result)
    findings = [f.as_dict() for f in scan_text(payload["text"], where=f"result of {row.qualified_name}")]
    findings += injected_call_findings(payload["text"], where=f"result of {row.qualified_name}")
    if not store.complete_call(row, state=CallState.FAILED if result.is_error else CallState.SUCCEEDED,
                               result=payload, error=payload["text"][:500] if result.is_error else "",
                               error_class="business" if result.is_error else "", findings=findings):
        raise LeaseLost(store.run_id)
    if findings:
        store.event("tool.finding", tool_call_id=str(row.id), tool=row.qualified_name,
                    findings=[{"code": f["code"], "severity": f["severity"], "message": f["message"]}
                              for f in findings])
        store.taint(f"The result of {row.qualified_name} looks like it carries instructions.")
    elif tool and (tool.get("trust_tier") == "third_party" or tool.get("open_world")):
        store.taint(f"{row.qualified_name} returns untrusted content.")


def _call(store: Any, *, tool: dict[str, Any] | None, row: Any, arguments: dict[str, Any]):
    """(result, "") or (None, error); None when a non-read call timed out (outcome unknown)."""
    if tool is None:
        return None, f"{row.qualified_name} is not a known tool."
    attempts = READ_RETRIES + 1 if tool.get("risk") == "read" else 1
    for attempt in range(1, attempts + 1):
        try:
            return call_tool(tool["server_id"], tool["name"], arguments, org_id=store.run.org_id), ""
        except ToolCallTimeout as exc:
            if tool.get("risk") != "read":
                return None
            error = str(exc)
        except ToolCallFailed as exc:
            error = str(exc)
        except Exception as exc:  # NotFound (server deleted) and the like
            return None, str(exc)[:500]
        if attempt < attempts:
            delay = backoff_delay(attempt)
            store.event("retry", what="tool", tool=row.qualified_name, attempt=attempt, delay_s=round(delay, 2),
                        error=error[:300])
            time.sleep(delay)
    return None, error


def answers(rows: list[Any]) -> ModelRequest:
    """The next request: one tool return per call of the response, in order."""
    parts = []
    for row in rows:
        assert row.state in ANSWERED, row.state
        parts.append(ToolReturnPart(tool_name=row.model_tool_name, tool_call_id=row.call_id,
                                    content=answer_text(row), outcome=_outcome(row)))
    return ModelRequest(parts=parts)


def _outcome(row: Any) -> str:
    if row.state in (CallState.DENIED, CallState.REJECTED, CallState.EXPIRED):
        return "denied"
    return "failed" if row.state == CallState.FAILED else "success"


def answer_text(row: Any) -> str:
    if row.state in (CallState.DENIED, CallState.REJECTED, CallState.EXPIRED):
        return f"DENIED: {row.reason}"
    if row.result is not None:
        text = row.result.get("text", "")
        prefix = "ERROR from the tool:\n" if row.result.get("is_error") else ""
        return prefix + wrap_tool_output(tool=row.qualified_name, text=text)
    return f"ERROR: the call failed: {row.error or 'no result'}"


def describe(rows: list[Any]) -> str:
    return json.dumps([{"tool": r.qualified_name, "state": r.state} for r in rows])
