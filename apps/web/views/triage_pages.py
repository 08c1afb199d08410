"""Inbox triage: the order, extra filters and page of the inbox, each item's age, and deciding several items at
once (each still its own decision, with M-of-N and separation of duties applied per item)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone

from apps.approvals import selectors as approvals
from apps.approvals import triage
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from apps.runs import decisions
from apps.runs import inbox as run_reads
from apps.web.access import member_required, post_only

PAGE = 25
BATCH_MAX = 100
UNREAD = object()  # item_context reads the run's summary itself


@dataclass(frozen=True)
class View:
    sort: str = "oldest"
    tool: str = ""
    age: str = ""
    page: int = 1

    @property
    def offset(self) -> int:
        return (self.page - 1) * PAGE


def view_of(params: Any) -> View:
    try:
        page = max(1, min(int(params.get("page") or 1), 10_000))
    except ValueError:
        page = 1
    sort = params.get("sort") if params.get("sort") in triage.SORTS else "oldest"
    return View(sort=sort, tool=(params.get("tool") or "")[:200], age=params.get("age") if params.get("age") in
                triage.AGES else "", page=page)


def summaries(requests: list) -> dict:
    return run_reads.run_summaries(requests)


def age(request: Any) -> dict[str, Any]:
    """How long the item has waited and how near it is to expiring: `urgency` "" / "soon" (three quarters of its
    time gone) / "now" (under an hour left)."""
    now = timezone.now()
    waited = max(0, int((now - request.created_at).total_seconds()))
    urgency = ""
    if request.expires_at and request.is_pending:
        total = (request.expires_at - request.created_at).total_seconds()
        left = (request.expires_at - now).total_seconds()
        urgency = "now" if left < 3600 else "soon" if total > 0 and left < total / 4 else ""
    return {"waited": waited_text(waited), "waited_seconds": waited, "urgency": urgency}


def waited_text(seconds: int) -> str:
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days = seconds // 86400
    return f"{days} day{'s' if days > 1 else ''}"


def page_context(request: HttpRequest, view: View, *, shown: int, more: bool, tools: list[str]) -> dict[str, Any]:
    params = {k: v for k, v in request.GET.items() if k != "page" and v}

    def link(page: int) -> str:
        return "?" + urlencode({**params, "page": page})
    return {"view": view, "sorts": triage.SORTS, "ages": {k: label for k, (label, _) in triage.AGES.items()},
            "tools": tools, "first_shown": view.offset + 1 if shown else 0, "last_shown": view.offset + shown,
            "next_page": link(view.page + 1) if more else "", "prev_page": link(view.page - 1) if view.page > 1 else ""}


@post_only
@member_required("approvals.decide")
def inbox_batch(request: HttpRequest) -> HttpResponse:
    """Approve or reject the selected items: one decision per item, through the same service as a single one,
    so a person's second vote, their own run under separation of duties or an item already decided is refused
    for that item alone and said so."""
    decision = request.POST.get("decision", "")
    ids = list(dict.fromkeys(request.POST.getlist("ids")))[:BATCH_MAX]
    target = request.POST.get("next", "")
    target = target if target.startswith("/") and not target.startswith("//") else "/inbox/"
    if decision not in ("approve", "reject") or not ids:
        messages.error(request, "Select at least one item, then approve or reject." if not ids
                       else "Choose approve or reject.")
        return redirect(target)
    comment = request.POST.get("comment", "").strip()
    done, refused = [], []
    for value in ids:
        approval_id, _, seen_hash = value.partition(":")  # the arguments' hash the person saw on the page
        try:
            item = approvals.get_approval(org_id=request.actor.org_id, approval_id=approval_id)
        except NotFound:
            refused.append(("an item", "it no longer exists"))
            continue
        try:
            decisions.decide_approval(actor=request.actor, approval_id=item.id, decision=decision, comment=comment,
                                     expected_args_hash=seen_hash)
        except (ValidationFailed, Conflict, PermissionDenied) as exc:
            refused.append((item.title, exc.message))
        else:
            done.append(item.title)
    verb = "Approved" if decision == "approve" else "Rejected"
    if done:
        messages.success(request, f"{verb} {len(done)} item{'s' if len(done) > 1 else ''}: {', '.join(done)}.")
    for title, why in refused:
        messages.warning(request, f"Not decided: {title}: {why}")
    return redirect(target)
