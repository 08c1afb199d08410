"""`human.ask`: the agent's question goes to people, the run parks, the answer is the call's result.

The call is held with a question item instead of an approval (same parking, same expiry, same resume as a
held call: apps/runs/services.py). The result carries who answered and when, so the trace and the model
see a person's words, not the tool's or the model's.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.approvals import questions
from apps.approvals.models import ApprovalKind, ApprovalStatus
from apps.runs.models import CallState

QUESTION_TTL = timedelta(hours=24)


def ask_person(store: Any, *, row: Any, turn: Any, tool: dict[str, Any], reason: str) -> None:
    """`proposed -> held` with a question in the inbox for the group the agent chose, in one transaction."""
    crew, args = store.run.snapshot.get("crew", {}), row.arguments
    ttl = timedelta(hours=crew["approval_ttl_hours"]) if crew.get("approval_ttl_hours") else QUESTION_TTL
    group = args.get("ask") or "approvers"
    expires_at = timezone.now() + ttl
    with store.atomic():
        request = questions.open_item(
            org_id=store.run.org_id, kind=ApprovalKind.QUESTION, run_id=store.run_id, tool_call_id=row.id,
            agent_id=turn.agent_id, tool_id=tool.get("id"), title=f"{turn.agent_name} asks: {args['question']}",
            reason=f"{turn.agent_name} asks {group} a question.",
            context={"ask": group, "question": args["question"], "choices": args.get("choices") or [],
                     "task": turn.task, "agent": turn.agent_name, "crew": store.run.crew_name,
                     "crew_id": str(store.run.crew_id) if store.run.crew_id else None},
            expires_at=expires_at, requested_by_user_id=store.run.started_by_id, arguments=args)
        store.set_call(row, expect=CallState.PROPOSED, state=CallState.HELD, decision="hold", rule="human_ask",
                       reason=reason, approval=request, decided_at=timezone.now(), event="tool.decided",
                       event_data={"decision": "hold", "state": "held", "rule": "human_ask", "reason": reason})
        store.event("question.asked", approval_id=str(request.id), tool_call_id=str(row.id), ask=group,
                    question=args["question"], expires_at=expires_at.isoformat())


def follow_question(store: Any, *, row: Any, request: Any) -> None:
    """An answered question completes its held call with the answer; an expired one ends it `expired`."""
    if request.status == ApprovalStatus.ANSWERED:
        text = (request.answer or {}).get("text", "")
        at = request.decided_at.isoformat() if request.decided_at else ""
        result = {"is_error": False, "text": text, "content": [{"type": "text", "text": text}],
                  "structured_content": None, "answered_by": request.decided_by_label, "answered_at": at}
        store.set_call(row, expect=CallState.HELD, state=CallState.SUCCEEDED, result=result,
                       finished_at=timezone.now(), event="tool.completed",
                       event_data={"state": "succeeded", "answered_by": request.decided_by_label, "at": at})
        return
    reason = ("Nobody answered this question in time; it expired." if request.status == ApprovalStatus.EXPIRED
              else f"The question ended {request.status}.")
    store.set_call(row, expect=CallState.HELD, state=CallState.EXPIRED, reason=reason, error_class="permission",
                   event="tool.decided", event_data={"decision": "deny", "state": "expired", "reason": reason})


def answer_text(row: Any) -> str | None:
    """What the model reads for an answered question: a person's words, marked as such."""
    result = row.result or {}
    if not result.get("answered_by"):
        return None
    return f"Answer from a person ({result['answered_by']}, {result.get('answered_at', '')}):\n{result['text']}"
