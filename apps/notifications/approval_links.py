"""Approval emails: each approver's own approve / reject / open links, and deciding through them.

A link is a random token in the URL (only its SHA-256 is stored, in `ApprovalLink`) bound to one
member, one request and the hash of the arguments the mail showed. Following it shows a
confirmation page (a GET never decides: mail scanners prefetch links); the page's POST, with
Django's CSRF token, decides as that member through the runs' `decide_approval`, so the vote
counts toward M of N as that person and separation of duties holds exactly as in the inbox.
The link needs no sign-in: the token is the credential, and it is worth one decision on one
request by one person, until the request is decided or expires.

An agent's question (`human.ask`) is mailed the same way to the people of its group: one link per
person to a page that shows the question (GET) and takes the answer (POST, CSRF), answering as that
member through runs' `questions.answer`, so the group check and the run's resume are the inbox's.

Runs sit above notifications, so `decide_by_link` and `answer_by_link` import runs' services lazily;
nothing else here reaches upward.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.accounts.models import Membership
from apps.audit.redaction import redact
from apps.core.errors import Conflict, NotFound
from apps.notifications.models import ApprovalLink, Notification

DECISIONS = ("approve", "reject", "respond")
MAILED_KINDS = ("tool_call", "question")  # the kinds whose email carries each person's own links


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def link_url(token: str, decision: str = "") -> str:
    path = reverse("web:approval_link", kwargs={"token": token})
    return settings.AIRLOCK_BASE_URL.rstrip("/") + path + (f"?do={decision}" if decision else "")


def issue_link(*, request: Any, membership: Any) -> str | None:
    """A fresh link for this member on this request; returns the token. A later mail (a reminder, an
    escalation) replaces the member's unused link, so only the newest mail's links work. None when the
    member already used theirs."""
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        link = (ApprovalLink.objects.select_for_update()
                .filter(approval_id=request.id, membership=membership).first())
        if link is not None:
            if link.used_at is not None:
                return None
            link.token_hash, link.args_hash = token_hash(token), request.approved_args_hash or request.args_hash
            link.save(update_fields=["token_hash", "args_hash", "updated_at"])
            return token
        try:
            with transaction.atomic():
                ApprovalLink.objects.create(org_id=request.org_id, approval_id=request.id, membership=membership,
                                            token_hash=token_hash(token), args_hash=request.args_hash,
                                            expires_at=request.expires_at)
        except IntegrityError:  # a concurrent mail to the same person made theirs first
            return None
    return token


SUBJECTS = {"request": "Approval needed", "reminder": "Reminder, expires soon", "escalation": "Escalated to you"}


def send_approval_emails(*, notification: Notification) -> int:
    """One mail per recipient of an `approval.requested` notification, each with that person's own links."""
    from apps.approvals.models import ApprovalRequest  # later app: approvals notify through this app

    request = (ApprovalRequest.objects.select_related("tool", "agent")
               .filter(org_id=notification.org_id, id=notification.payload.get("approval_id")).first())
    if request is None:
        return 0
    if request.kind == "question":
        return mail_question(request=request, emails=notification.email_to)
    return mail_request(request=request, emails=notification.email_to, reason="request")


def mail_question(*, request: Any, emails: list[str]) -> int:
    """Mails a pending question to those of `emails` who are in its group (`context["ask"]`), each with
    their own answer link. Returns how many mails were sent."""
    from apps.approvals.questions import GROUP_ROLES  # later app: approvals notify through this app

    if not request.is_pending:
        return 0
    roles = GROUP_ROLES.get(request.context.get("ask") or "approvers") or ("owner", "admin", "approver")
    members = (Membership.objects.select_related("user")
               .filter(org_id=request.org_id, user__email__in=emails, role__in=roles))
    inbox_url = settings.AIRLOCK_BASE_URL.rstrip("/") + reverse("web:inbox")
    sent = 0
    for membership in members:
        token = issue_link(request=request, membership=membership)
        if token is None:
            continue
        context = {"request": request, "question": request.context.get("question", request.title),
                   "choices": request.context.get("choices") or [], "member": membership,
                   "answer_url": link_url(token), "inbox_url": inbox_url}
        message = EmailMultiAlternatives(subject=f"[Airlock] Question: {request.title}"[:200],
                                         body=render_to_string("web/approvals/question_email.txt", context),
                                         to=[membership.user.email])
        message.attach_alternative(render_to_string("web/approvals/question_email.html", context), "text/html")
        message.send(fail_silently=False)
        sent += 1
    return sent


def mail_request(*, request: Any, emails: list[str], reason: str) -> int:
    """Mails a pending request to those of `emails` who are approvers of its org, each with their own
    links (`reason`: request, reminder or escalation). Returns how many mails were sent."""

    if not request.is_pending:
        return 0
    members = (Membership.objects.select_related("user")
               .filter(org_id=request.org_id, user__email__in=emails, role__in=("owner", "admin", "approver")))
    arguments = json.dumps(redact(request.approved_arguments or request.arguments), indent=2, sort_keys=True,
                           ensure_ascii=False, default=str)
    inbox_url = settings.AIRLOCK_BASE_URL.rstrip("/") + reverse("web:inbox")
    sent = 0
    for membership in members:
        token = issue_link(request=request, membership=membership)
        if token is None:
            continue
        context = {"request": request, "arguments": arguments, "member": membership, "reason": reason,
                   "approve_url": link_url(token, "approve"), "reject_url": link_url(token, "reject"),
                   "open_url": link_url(token), "inbox_url": inbox_url}
        message = EmailMultiAlternatives(
            subject=f"[Airlock] {SUBJECTS[reason]}: {request.title}"[:200],
            body=render_to_string("web/approvals/email.txt", context), to=[membership.user.email])
        message.attach_alternative(render_to_string("web/approvals/email.html", context), "text/html")
        message.send(fail_silently=False)
        sent += 1
    return sent


@dataclass(frozen=True)
class OpenedLink:
    """What the confirmation page shows: the link, its member, the request, and why it cannot be used
    (empty: it can)."""

    link: ApprovalLink
    request: Any
    problem: str


def open_link(*, token: str) -> OpenedLink:
    """The link behind `token`, read-only. Raises NotFound for a token that was never issued."""
    from apps.approvals.models import ApprovalRequest  # later app: approvals notify through this app

    link = (ApprovalLink.objects.select_related("membership__user")
            .filter(token_hash=token_hash(token)).first())
    if link is None:
        raise NotFound("This approval link is not valid. Open the inbox instead.")
    request = (ApprovalRequest.objects.select_related("tool", "agent")
               .filter(org_id=link.org_id, id=link.approval_id).first())
    if request is None:
        raise NotFound("The request behind this link no longer exists.")
    return OpenedLink(link=link, request=request, problem=_problem(link, request))


def _problem(link: ApprovalLink, request: Any) -> str:
    from apps.approvals.services import already_decided  # later app: approvals notify through this app

    if not request.is_pending:
        return already_decided(request)
    if link.used_at is not None:
        return (f"You already used this link to {link.used_for} "
                f"(at {timezone.localtime(link.used_at).strftime('%Y-%m-%d %H:%M %Z')}).")
    if link.expires_at is not None and link.expires_at <= timezone.now():
        return "This request expired; nobody can decide it any more."
    if (request.approved_args_hash or request.args_hash) != link.args_hash:
        return "The arguments changed since this email was sent (another approver edited them): open the inbox."
    return ""


def link_actor(link: ApprovalLink) -> Actor:
    """The member the link was mailed to, with their role as it is now (a demoted member's link is refused)."""
    membership = link.membership
    return Actor(org_id=link.org_id, role=membership.role, label=f"{membership.user.email} (email)",
                 user_id=membership.user_id)


def decide_by_link(*, token: str, decision: str, comment: str = "") -> Any:
    """Decides the link's request as its member: approve, reject (with an optional comment) or
    respond (the text goes back to the agent instead of the call). Marks the link used in the same
    transaction. Returns the approval request. Raises NotFound, Conflict (used, decided, expired,
    arguments changed), PermissionDenied (role, separation of duties), ValidationFailed."""
    from apps.runs.decisions import decide_approval  # later app: runs notify through this app

    if decision not in DECISIONS:
        raise Conflict("Choose approve, reject or respond.")
    with transaction.atomic():
        link = (ApprovalLink.objects.select_for_update(of=("self",)).select_related("membership__user")
                .filter(token_hash=token_hash(token)).first())
        if link is None:
            raise NotFound("This approval link is not valid. Open the inbox instead.")
        opened = open_link(token=token)
        if opened.problem:
            raise Conflict(opened.problem)
        request = decide_approval(actor=link_actor(link), approval_id=link.approval_id, decision=decision,
                                  comment=comment, expected_args_hash=link.args_hash)
        link.used_at, link.used_for = timezone.now(), decision
        link.save(update_fields=["used_at", "used_for", "updated_at"])
    return request


def answer_by_link(*, token: str, text: str) -> Any:
    """Answers the link's question as its member (the group check and the run's resume are runs'
    `questions.answer`). Marks the link used in the same transaction. Returns the request. Raises
    NotFound, Conflict (used, answered, expired), PermissionDenied (not in the group), ValidationFailed."""
    from apps.runs.questions import answer  # later app: runs notify through this app

    with transaction.atomic():
        link = (ApprovalLink.objects.select_for_update(of=("self",)).select_related("membership__user")
                .filter(token_hash=token_hash(token)).first())
        if link is None:
            raise NotFound("This link is not valid. Open the inbox instead.")
        opened = open_link(token=token)
        if opened.request.kind != "question":
            raise Conflict("This link is for a held call, not a question.")
        if opened.problem:
            raise Conflict(opened.problem)
        request = answer(actor=link_actor(link), approval_id=link.approval_id, text=text)
        link.used_at, link.used_for = timezone.now(), "answer"
        link.save(update_fields=["used_at", "used_for", "updated_at"])
    return request


def links_of(*, org_id: UUID | str, approval_id: UUID | str) -> list[ApprovalLink]:
    return list(ApprovalLink.objects.filter(org_id=org_id, approval_id=approval_id).select_related("membership__user"))
