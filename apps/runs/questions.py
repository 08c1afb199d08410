"""A person answers an agent's question (`human.ask`) or a server's elicitation, and what that does to the run.

A question's run is parked like one with a held call (no worker waits): the answer resumes it, and the
engine turns the answer into the call's result (apps/runs/engine/asking.py). An elicitation's call is still
open on a worker (MCP holds the request until the form is answered or the call times out): the answer is
read by that worker (apps/registry/host.py), so nothing is enqueued here.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction

from apps.accounts.actors import Actor
from apps.approvals import questions
from apps.approvals.models import ApprovalKind, ApprovalRequest
from apps.core.errors import NotFound
from apps.runs.ledger import append_event
from apps.runs.models import Run
from apps.runs.queue import enqueue

ANSWERABLE = (ApprovalKind.QUESTION, ApprovalKind.ELICITATION)


def answer(*, actor: Actor, approval_id: UUID | str, text: str = "", action: str = "",
           content: dict[str, Any] | None = None) -> ApprovalRequest:
    """Records a person's answer to a pending question (`text`) or elicitation (`action`, `content`) and, for a
    question whose run has nothing else pending, resumes the run. Writes the request, its audit row and a run
    event (`question.answered` / `elicitation.answered`). Raises NotFound, PermissionDenied (not in the asked
    group), Conflict (already answered or expired), ValidationFailed (field errors)."""
    from apps.runs.decisions import resume_if_ready  # decisions imports the engine, which imports us

    with transaction.atomic():
        request = (ApprovalRequest.objects.select_for_update()
                   .filter(org_id=actor.org_id, id=approval_id, kind__in=ANSWERABLE).first())
        if request is None:
            raise NotFound("No such question.")
        run = Run.objects.select_for_update().only("id", "org_id", "status").filter(id=request.run_id).first() \
            if request.run_id else None
        cleaned = questions.clean_answer(request, text=text, action=action, content=content)
        request = questions.record_answer(actor=actor, request=request, answer=cleaned)
        if run is None:
            return request
        append_event(run.id, f"{request.kind}.answered", approval_id=str(request.id),
                     tool_call_id=str(request.tool_call_id) if request.tool_call_id else None, by=actor.label,
                     at=request.decided_at.isoformat(), answer=cleaned)
        if request.kind == ApprovalKind.QUESTION and resume_if_ready(run, enqueue=False):
            transaction.on_commit(lambda: enqueue(run.id, resume=True))
    return request
