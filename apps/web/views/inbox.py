"""The approval inbox: pending items with everything needed to judge them, decisions (approve,
reject with a comment, edit then approve, standing approvals), the calls whose outcome is unknown
(answered through `web:tool_call_resolve`), the standing-approvals page.

The item card (`web/inbox/_item.html`) is the one partial for the inbox, the run page's inline
decision form and the live updates the inbox socket pushes.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.approvals import questions, standing, triage
from apps.approvals import selectors as approvals
from apps.approvals.forms_schema import coerce, form_fields
from apps.approvals.models import ApprovalKind, ApprovalRequest
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from apps.crews import selectors as crews
from apps.registry import selectors as registry
from apps.runs import decisions as run_decisions
from apps.runs import questions as answering
from apps.runs import selectors as runs
from apps.web.access import member_required, post_only
from apps.web.forms import DecisionForm
from apps.web.views import triage_pages

FILTERS = ("crew", "agent", "server", "risk", "kind")
RISKS = ("read", "write", "dangerous")
LAST_STEPS = 5
UNKNOWN_SHOWN = 50


def inbox_filters(params: Any) -> dict[str, Any]:
    """The inbox's filters from a query string; malformed values are ignored."""
    out: dict[str, Any] = {}
    for key, field in (("crew", "crew_id"), ("agent", "agent_id"), ("server", "server_id")):
        with contextlib.suppress(ValueError):
            out[field] = uuid.UUID(params.get(key, ""))
    if params.get("risk") in RISKS:
        out["risk"] = params["risk"]
    if params.get("kind") in ApprovalKind.values:
        out["kind"] = params["kind"]
    return out


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def arguments_diff(before: Any, after: Any) -> str:
    if after is None or after == before:
        return ""
    return "\n".join(difflib.unified_diff(pretty(before).splitlines(), pretty(after).splitlines(),
                                          "proposed", "edited", lineterm=""))


def _field_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def argument_fields(request: ApprovalRequest, values: dict[str, str] | None = None,
                    errors: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One form field per top-level argument (from the tool's input schema), with its error."""
    schema = (request.tool.input_schema if request.tool_id and request.tool else None) or {}
    props = schema.get("properties") or {}
    names = list(props) + [k for k in request.arguments if k not in props]
    required = set(schema.get("required") or [])
    errors = errors or {}
    fields = []
    for name in names:
        spec = props.get(name) or {}
        kind = spec.get("type") if isinstance(spec.get("type"), str) else "json"
        raw = values[name] if values is not None and name in values else _field_value(request.arguments.get(name))
        nested = [m for k, m in errors.items() if k.startswith(f"arguments.{name}.")]
        fields.append({"name": name, "type": kind, "description": spec.get("description", ""), "value": raw,
                       "required": name in required, "error": errors.get(f"arguments.{name}") or "; ".join(nested),
                       "multiline": kind in ("object", "array", "json") or len(raw) > 80})
    return fields


def run_summary(request: ApprovalRequest) -> dict[str, Any] | None:
    """The run's task, its last steps (ledger rows) and findings, for the reviewer."""
    if not request.run_id:
        return None
    try:
        run = runs.get_run(org_id=request.org_id, run_id=request.run_id)
    except NotFound:
        return None
    ledger = list(runs.run_ledger(run))
    findings = [f for row in ledger for f in (row.findings or [])]
    return {"run": run, "last_steps": ledger[-LAST_STEPS:], "findings": findings, "tainted": run.tainted,
            "taint": runs.taint_origin(run)}


def item_context(request: ApprovalRequest, actor: Actor, *, values: dict[str, str] | None = None,
                 errors: dict[str, str] | None = None, message: str = "", message_level: str = "",
                 summary: Any = triage_pages.UNREAD) -> dict:
    """`summary`: the run's context when the caller read it with others (`triage_pages.summaries`)."""
    votes = list(request.votes.all())
    voted = next((v for v in votes if actor.user_id is not None and v.user_id == actor.user_id), None)
    definition = request.kind == ApprovalKind.DEFINITION_CHANGE
    separation = approvals.starter_refusal(request, user_id=actor.user_id)
    separated = bool(separation)
    allowed = actor.can("servers.manage") if definition else actor.can("approvals.decide")
    seconds_left = (request.expires_at - timezone.now()).total_seconds() if request.expires_at else None
    return {
        "r": request, "votes": votes, "voted": voted, "definition": definition,
        "can_decide": request.is_pending and allowed and voted is None,
        "may_approve": not separated, "separated": separated, "separation": separation,
        "arguments": pretty(request.arguments),
        "edit_diff": arguments_diff(request.arguments, request.approved_arguments),
        # A server's sampling request is approved or rejected as asked: its prompt is not edited here.
        "fields": [] if definition or request.kind == ApprovalKind.SAMPLING else argument_fields(request, values,
                                                                                                 errors),
        "errors": errors or {}, "message": message, "message_level": message_level or "info",
        "standing_offered": not definition and request.kind == ApprovalKind.TOOL_CALL and request.risk != "dangerous"
        and request.required_approvals == 1,
        "summary": run_summary(request) if summary is triage_pages.UNREAD else summary,
        "seconds_left": seconds_left, "expired_soon": seconds_left is not None and seconds_left < 3600,
        **triage_pages.age(request),
        "tool_risk": request.risk,
        **answer_context(request, actor, values=values, errors=errors),
    }


def answer_context(request: ApprovalRequest, actor: Actor, *, values: dict[str, str] | None,
                   errors: dict[str, str] | None) -> dict[str, Any]:
    """What the answer form of a question or an elicitation needs (apps/approvals/questions.py)."""
    if request.kind not in (ApprovalKind.QUESTION, ApprovalKind.ELICITATION):
        return {"answerable": False}
    fields = form_fields(request.context.get("schema") or {}) if request.kind == ApprovalKind.ELICITATION else []
    for field in fields:
        field["value"] = (values or {}).get(field["name"], "")
        field["error"] = (errors or {}).get(f"content.{field['name']}", "")
    return {"answerable": True, "form_fields": fields,
            "can_answer": request.is_pending and questions.may_answer(actor, request)}


def render_item(http_request: HttpRequest | None, request: ApprovalRequest, actor: Actor, status: int = 200,
                **extra: Any) -> HttpResponse:
    return render(http_request, "web/inbox/_item.html", item_context(request, actor, **extra), status=status)


SOCKET_VIEW = ("sort", "tool", "age", "page")  # the page's own view, which its socket must show the same way


def pending_page(actor: Actor, params: Any, *, http_request: HttpRequest | None = None) -> tuple[list[str], list, bool]:
    """One inbox page's pending items in triage order, rendered (each selectable for a batch decision), the
    requests shown, and whether more follow. The page and its socket both use it, so a reconnect shows
    the same items in the same order."""
    page = list(_page_window(actor, params, extra=1))
    shown = page[:triage_pages.PAGE]
    summaries = triage_pages.summaries(shown)
    items = [render_to_string("web/inbox/_item.html", {**item_context(r, actor, summary=summaries.get(r.id)),
                                                       "selectable": True}, request=http_request)
             for r in shown]
    return items, shown, len(page) > len(shown)


def _page_window(actor: Actor, params: Any, *, extra: int = 0):
    """The pending requests one inbox page shows, in its order (`extra` more: whether another page follows)."""
    view = triage_pages.view_of(params)
    pending = triage.pending(org_id=actor.org_id, sort=view.sort, tool=view.tool, age=view.age,
                             **inbox_filters(params))
    return pending[view.offset:view.offset + triage_pages.PAGE + extra]


def moved_items(actor: Actor, params: Any, *, shown: dict) -> list:
    """The items an open inbox page has not caught up with (its socket's catch-up): those it shows that changed
    since (`shown`: id -> the `updated_at` it shows; a vote, an edit, a decision or the expiry each moves it), and
    those now in its window that it does not show."""
    changed = [i for i, at in approvals.org_approvals(org_id=actor.org_id).filter(id__in=list(shown))
               .values_list("id", "updated_at") if at != shown[i]]
    new = [i for i in _page_window(actor, params).values_list("id", flat=True) if i not in shown]
    return [*changed, *new]


@member_required()
def inbox(request: HttpRequest) -> HttpResponse:
    """Pending items in triage order (oldest first unless sorted otherwise), a page at a time."""
    org_id = request.actor.org_id
    filters = inbox_filters(request.GET)
    view = triage_pages.view_of(request.GET)
    items, shown, more = pending_page(request.actor, request.GET, http_request=request)
    recent = approvals.org_approvals(org_id=org_id, **filters).exclude(status="pending")[:20]
    query = "&".join(f"{k}={request.GET[k]}" for k in FILTERS if request.GET.get(k))
    socket_query = urlencode({k: request.GET[k] for k in (*FILTERS, *SOCKET_VIEW) if request.GET.get(k)})
    unknown = [] if filters.get("kind") == ApprovalKind.DEFINITION_CHANGE else list(
        runs.unknown_calls(org_id=org_id, **{k: v for k, v in filters.items() if k != "kind"})[:UNKNOWN_SHOWN])
    context = {"items": items, "recent": recent, "unknown_calls": unknown, "socket_query": socket_query,
               "can_resolve": request.actor.can("approvals.decide"), "here": request.get_full_path(),
               "filters": {k: request.GET.get(k, "") for k in FILTERS}, "query": query,
               "since": timezone.now().isoformat(),
               "crews": crews.org_crews(org_id=org_id), "agents": agents.org_agents(org_id=org_id),
               "servers": registry.servers_for_org(org_id=org_id), "risks": RISKS, "kinds": ApprovalKind.choices,
               **triage_pages.page_context(request, view, shown=len(shown), more=more,
                                           tools=triage.pending_tools(org_id=org_id))}
    return render(request, "web/inbox/list.html", context)


@post_only
@member_required("approvals.decide")
def inbox_decide(request: HttpRequest, approval_id) -> HttpResponse:
    actor = request.actor
    item = approvals.get_approval(org_id=actor.org_id, approval_id=approval_id)
    form = DecisionForm(request.POST, item=item)
    try:
        outcome = run_decisions.decide(actor=actor, approval_id=item.id, **form.decision_arguments())
    except ValidationFailed as exc:  # nothing was written: the item is as read above
        if request.htmx:
            return render_item(request, item, actor, status=422, values=form.values, errors=exc.errors,
                               message=exc.message, message_level="danger")
        messages.error(request, f"{exc.message} " + " ".join(f"{k}: {v}" for k, v in exc.errors.items()))
        return redirect(_next(request))
    except Conflict as exc:
        if not request.htmx:
            raise
        item = approvals.get_approval(org_id=actor.org_id, approval_id=approval_id)  # as someone else left it
        return render_item(request, item, actor, status=409, message=exc.message, message_level="warning")
    text = _outcome_text(outcome)
    if request.htmx:
        return render_item(request, outcome.request, actor, message=text, message_level="success")
    messages.success(request, text)
    return redirect(_next(request))


@post_only
@member_required()
def inbox_answer(request: HttpRequest, approval_id) -> HttpResponse:
    """A person answers a question (text or one of its choices) or a server's form (accept with the fields,
    decline, cancel). Who may answer is the item's group, checked by the service."""
    actor = request.actor
    item = approvals.get_approval(org_id=actor.org_id, approval_id=approval_id)
    values = {k[6:]: v for k, v in request.POST.items() if k.startswith("field.")}
    content = coerce(item.context.get("schema") or {}, values) if item.kind == ApprovalKind.ELICITATION else None
    try:
        answering.answer(actor=actor, approval_id=item.id, text=request.POST.get("answer", ""),
                         action=request.POST.get("action", ""), content=content)
    except ValidationFailed as exc:
        return _answer_refused(request, item, status=422, message=exc.message, values=values, errors=exc.errors)
    except (Conflict, PermissionDenied) as exc:
        return _answer_refused(request, item, status=409 if isinstance(exc, Conflict) else 403,
                               message=str(exc))
    item = approvals.get_approval(org_id=actor.org_id, approval_id=approval_id)
    text = "Answered: the agent reads your answer." if item.kind == ApprovalKind.QUESTION else \
        f"Sent to the server: {item.answer.get('action')}."
    if request.htmx:
        return render_item(request, item, actor, message=text, message_level="success")
    messages.success(request, text)
    return redirect(_next(request))


def _answer_refused(request: HttpRequest, item: ApprovalRequest, *, status: int, message: str,
                    values: dict[str, str] | None = None, errors: dict[str, str] | None = None) -> HttpResponse:
    item = approvals.get_approval(org_id=request.actor.org_id, approval_id=item.id)
    if request.htmx:
        return render_item(request, item, request.actor, status=status, values=values, errors=errors,
                           message=message, message_level="danger" if status != 409 else "warning")
    messages.error(request, message + ("" if not errors else " " + " ".join(f"{k}: {v}" for k, v in errors.items())))
    return redirect(_next(request))


def _outcome_text(outcome: run_decisions.Decision) -> str:
    item = outcome.request
    if item.status == "pending":
        return f"Your approval is recorded: {outcome.approvals} of {item.required_approvals} needed."
    if item.kind == ApprovalKind.DEFINITION_CHANGE:
        what = "resource" if item.tool_id is None and (item.context or {}).get("resource_id") else "tool"
        return (f"Pinned: the {what} is active again." if item.status == "approved"
                else f"Rejected: the {what} stays quarantined.")
    if item.status == "approved":
        return "Approved with your edits: the run resumes." if outcome.edited else "Approved: the run resumes."
    if item.status == "answered":
        return "Answered: the call does not run; the agent gets your words as its result and the run resumes."
    return "Rejected: the run resumes and the agent is told why."


def _next(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    return target if target.startswith("/") and not target.startswith("//") else reverse("web:inbox")


@member_required()
def standing_list(request: HttpRequest) -> HttpResponse:
    rows = standing.org_standing(org_id=request.actor.org_id)
    now = timezone.now()
    items = [{"s": s, "live": s.revoked_at is None and (s.expires_at is None or s.expires_at > now)} for s in rows]
    return render(request, "web/inbox/standing.html",
                  {"items": items, "can_revoke": request.actor.can("approvals.decide")})


@post_only
@member_required("approvals.decide")
def standing_revoke(request: HttpRequest, standing_id) -> HttpResponse:
    standing.revoke_standing(actor=request.actor, standing_id=standing_id)
    messages.success(request, "Revoked: later calls are held again.")
    return redirect("web:standing_approvals")
