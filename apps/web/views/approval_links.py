"""An approval email's link: the confirmation page (GET shows, never decides) and its POST.

No sign-in: the link's token names the member (apps.notifications.approval_links). The POST
carries Django's CSRF token from this page, so only a browser that rendered the page can decide:
a mail scanner's prefetch (GET) or another site's forged form cannot.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from apps.notifications import approval_links

DONE = {"approve": "You approved this call.", "reject": "You rejected this call.",
        "respond": "Your answer was sent to the agent instead of the call."}


@never_cache
def approval_link(request: HttpRequest, token: str) -> HttpResponse:
    try:
        opened = approval_links.open_link(token=token)
    except NotFound as exc:
        return render(request, "web/error.html", {"status": 404, "title": "Not found", "message": exc.message},
                      status=404)
    context = {"opened": opened, "want": request.GET.get("do", ""), "comment": "",
               "arguments": json.dumps(opened.request.approved_arguments or opened.request.arguments, indent=2,
                                       sort_keys=True, ensure_ascii=False, default=str)}
    if opened.request.kind == "question":
        return _question(request, token, opened)
    status = 200
    if request.method == "POST":
        decision, comment = request.POST.get("decision", ""), request.POST.get("comment", "").strip()[:4000]
        try:
            if decision == "respond" and not comment:
                raise ValidationFailed("Write the answer the agent should get.", {})
            decided = approval_links.decide_by_link(token=token, decision=decision, comment=comment)
            context["done"] = DONE[decision] + (
                f" {decided.votes_cast} of {decided.required_approvals} approvals so far."
                if decided.is_pending else "")
        except (Conflict, PermissionDenied, ValidationFailed) as exc:
            context.update(error=exc.message, comment=comment, want=decision)
            status = 403 if isinstance(exc, PermissionDenied) else 409 if isinstance(exc, Conflict) else 400
        context["opened"] = approval_links.open_link(token=token)
    # The token is in the URL: the site's Referrer-Policy (same-origin) keeps it from other sites. Not
    # no-referrer: browsers then send `Origin: null` with the form's POST, which CSRF rightly refuses.
    return render(request, "web/approvals/link.html", context, status=status)


def _question(request: HttpRequest, token: str, opened: approval_links.OpenedLink) -> HttpResponse:
    """A mailed question: GET shows it and the answer form; the POST answers as the link's member."""
    context = {"opened": opened, "answer": "", "question": opened.request.context.get("question", ""),
               "choices": opened.request.context.get("choices") or []}
    status = 200
    if request.method == "POST":
        text = request.POST.get("answer", "")
        try:
            approval_links.answer_by_link(token=token, text=text)
            context["done"] = "Your answer was sent to the agent."
        except (Conflict, PermissionDenied, ValidationFailed) as exc:
            context.update(error=exc.message, answer=text, errors=getattr(exc, "errors", {}) or {})
            status = 403 if isinstance(exc, PermissionDenied) else 409 if isinstance(exc, Conflict) else 422
        context["opened"] = approval_links.open_link(token=token)
    return render(request, "web/approvals/question_link.html", context, status=status)
