"""Slack approvals: an org's Slack app posts each held call as an interactive message (Approve /
Reject / Answer instead), Slack's interactions decide it as the member the Slack user is, and the
message is updated for everyone once the request is decided, here or anywhere else.

The Web API is `slack_sdk.WebClient`, pointed at AIRLOCK_SLACK_API_URL (tests: a fake on loopback);
its host passes the egress guard before every call. An interaction is trusted only with a valid
Slack signature on a timestamp inside Slack's five-minute window
(`slack_sdk.signature.SignatureVerifier`), and its user only through the email Slack says is
verified (users.info), matched to a member who may decide approvals. Runs sit above notifications:
`handle_interaction` imports runs' decide service lazily.

An agent's question (`human.ask`) is posted the same way with one "Answer" button: it opens a form
(a modal) whose submission answers the question as the member, through runs' `questions.answer`,
which checks that the member is in the question's group.

slack_sdk is imported where Slack is called, not with this module: every worker child imports the notification
tasks, and slack_sdk (~2 MB of a child's memory) stays out of every process that never talks to Slack. Slack's
errors come out as `SlackError`, which the tasks retry on without importing slack_sdk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.accounts.models import Membership
from apps.audit import services as audit
from apps.audit.redaction import redact
from apps.core.egress import check_url
from apps.core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from apps.notifications.models import SlackConnection, SlackPost

RISKS = ("read", "write", "dangerous")
ACTIONS = {"airlock_approve": "approve", "airlock_reject": "reject", "airlock_respond": "respond"}
ARGUMENTS_SHOWN = 2800  # Slack's section text limit is 3000 characters


# --- the connection (Settings) --------------------------------------------------------------------

def connect(*, actor: Actor, bot_token: str = "", signing_secret: str = "", channel: str,
            risk_channels: dict[str, str] | None = None,
            crew_channels: dict[str, str] | None = None) -> SlackConnection:
    """Creates or updates the org's Slack connection. An empty token or secret keeps the stored one
    (they are write-only). Raises ValidationFailed with field errors."""
    actor.require("members.manage")
    existing = SlackConnection.objects.filter(org_id=actor.org_id).first()
    stored = existing.credentials if existing else {}
    bot_token, signing_secret = (bot_token or "").strip(), (signing_secret or "").strip()
    credentials = {"bot_token": bot_token or stored.get("bot_token", ""),
                   "signing_secret": signing_secret or stored.get("signing_secret", "")}
    errors = {}
    if not credentials["bot_token"].startswith("xoxb-"):
        errors["bot_token"] = "Paste the app's bot token (it starts with xoxb-)."
    if len(credentials["signing_secret"]) < 16:
        errors["signing_secret"] = "Paste the app's signing secret (Basic Information → App Credentials)."
    channel = (channel or "").strip().lstrip("#")
    if not channel:
        errors["channel"] = "Choose the channel held calls are posted to."
    risk_channels = {k: v.strip().lstrip("#") for k, v in (risk_channels or {}).items() if v and v.strip()}
    if unknown := sorted(set(risk_channels) - set(RISKS)):
        errors["risk_channels"] = f"Unknown risks: {', '.join(unknown)}."
    crew_channels = {str(k): v.strip().lstrip("#") for k, v in (crew_channels or {}).items() if v and v.strip()}
    if crew_channels:
        from apps.crews.models import Crew  # later app: crews sit above notifications; a route names a crew

        known = {str(i) for i in Crew.objects.filter(org_id=actor.org_id).values_list("id", flat=True)}
        if set(crew_channels) - known:
            errors["crew_channels"] = "Some of these crews are not this organisation's."
    if errors:
        raise ValidationFailed("The Slack connection could not be saved.", errors)
    values = {"credentials": credentials, "channel": channel[:100], "risk_channels": risk_channels,
              "crew_channels": crew_channels, "enabled": True}
    with transaction.atomic():
        if existing is None:
            connection = SlackConnection.objects.create(org_id=actor.org_id, created_by_label=actor.label, **values)
        else:
            for key, value in values.items():
                setattr(existing, key, value)
            existing.save(update_fields=[*values, "updated_at"])
            connection = existing
        audit.record(org_id=actor.org_id, actor=actor, action="slack.connected", target=connection,
                     target_label="Slack", data={"channel": connection.channel, "risk_channels": risk_channels,
                                                 "crew_channels": crew_channels,
                                                 "token_changed": bool(bot_token),
                                                 "secret_changed": bool(signing_secret)})
    return connection


def disconnect(*, actor: Actor) -> None:
    actor.require("members.manage")
    with transaction.atomic():
        connection = SlackConnection.objects.filter(org_id=actor.org_id).first()
        if connection is None:
            raise NotFound("Slack is not connected.")
        audit.record(org_id=actor.org_id, actor=actor, action="slack.disconnected", target=connection,
                     target_label="Slack")
        connection.delete()


def connection_of(org_id: UUID | str) -> SlackConnection | None:
    return SlackConnection.objects.filter(org_id=org_id, enabled=True).first()


class SlackError(Exception):
    """Slack answered a Web API call with an error (slack_sdk's SlackApiError); `error` is Slack's code."""

    def __init__(self, error: str) -> None:
        # Slack's error codes are short words ("ratelimited"); anything else a server sent back is not repeated
        # into the task log.
        self.error = re.sub(r"[^A-Za-z0-9_.-]", "", error)[:60] or "error"
        super().__init__(f"Slack answered: {self.error}")


class Client:
    """The Web API of one connection: `client.chat_postMessage(...)` is slack_sdk's WebClient method of that name,
    whose error answers are raised as SlackError."""

    def __init__(self, token: str, base_url: str) -> None:
        from slack_sdk import WebClient

        self._web = WebClient(token=token, base_url=base_url, timeout=10)

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._web, method)

        def answered(**arguments: Any) -> Any:
            from slack_sdk.errors import SlackApiError

            try:
                return call(**arguments)
            except SlackApiError as exc:
                raise SlackError(str(exc.response.get("error") or "error")) from None

        return answered


def client(connection: SlackConnection) -> Client:
    """A Web API client for the connection; the API's host is checked by the egress guard first."""

    base_url = settings.AIRLOCK_SLACK_API_URL
    check_url(base_url)
    return Client(connection.credentials["bot_token"], base_url)


# --- posting and updating -------------------------------------------------------------------------

def channel_for(connection: SlackConnection, request: Any) -> str:
    crew_id = ""
    if request.run_id:
        from apps.runs.models import Run  # later app: runs notify through this app

        crew_id = str(Run.objects.filter(org_id=request.org_id, id=request.run_id)
                      .values_list("crew_id", flat=True).first() or "")
    return (connection.crew_channels.get(crew_id) or connection.risk_channels.get(request.risk)
            or connection.channel)


def _request(org_id: UUID | str, approval_id: UUID | str) -> Any:
    from apps.approvals.models import ApprovalRequest  # later app: approvals notify through this app

    return (ApprovalRequest.objects.select_related("tool", "agent", "requested_by_user")
            .filter(org_id=org_id, id=approval_id).first())


def question_blocks(request: Any, *, interactive: bool) -> list[dict[str, Any]]:
    """Who asks, the question and its suggested answers; the Answer button while pending, else who answered."""
    context = request.context or {}
    lead = f"*{context.get('agent') or 'An agent'}* asks {context.get('ask') or 'approvers'}"
    lead += f" (crew {context['crew']})" if context.get("crew") else ""
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": f"{lead}:\n>{context.get('question', '')}"}}]
    if context.get("choices"):
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": "Suggested: " + ", ".join(str(c) for c in context["choices"])}]})
    if interactive:
        blocks.append({"type": "actions", "block_id": "airlock_question", "elements": [
            {"type": "button", "action_id": "airlock_answer", "style": "primary", "value": str(request.id),
             "text": {"type": "plain_text", "text": "Answer"}}]})
    else:
        answer = (request.answer or {}).get("text", "")
        text = decided_text(request) + (f" “{answer}”" if answer else "")
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    return blocks


def message_blocks(request: Any, *, interactive: bool) -> list[dict[str, Any]]:
    """Tool, risk, why it waits, arguments, who asked; the buttons while it is pending, else who decided."""

    if request.kind == "question":
        return question_blocks(request, interactive=interactive)

    tool = request.tool.qualified_name if request.tool_id and request.tool else request.title
    asked = request.requested_by_user.email if request.requested_by_user_id else "a schedule or trigger"
    agent = request.agent.name if request.agent_id and request.agent else "an agent"
    arguments = json.dumps(redact(request.arguments), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{tool}* · risk *{request.risk}*\n"
                                                               f"{agent} asks, in a run started by {asked}."}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Why it waits:* {request.reason}"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{arguments[:ARGUMENTS_SHOWN]}```"}},
    ]
    if interactive:
        value = str(request.id)
        blocks.append({"type": "actions", "block_id": "airlock_decision", "elements": [
            {"type": "button", "action_id": "airlock_approve", "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": "airlock_reject", "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Reject"}},
            {"type": "button", "action_id": "airlock_respond", "value": value,
             "text": {"type": "plain_text", "text": "Answer instead"}}]})
    else:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": decided_text(request)}]})
    return blocks


def decided_text(request: Any) -> str:
    from apps.approvals.services import already_decided  # later app: approvals notify through this app

    text = already_decided(request).replace("This request was already", "This request was")
    return text + (f" “{request.comment}”" if request.comment else "")


def post_approval(*, approval_id: UUID | str, org_id: UUID | str) -> SlackPost | None:
    """Posts a pending request to its channel once (claimed by the unique approval id). Returns the post."""
    connection, request = connection_of(org_id), _request(org_id, approval_id)
    if connection is None or request is None or not request.is_pending or \
            SlackPost.objects.filter(approval_id=request.id).exists():
        return None
    channel = channel_for(connection, request)
    lead = "Question" if request.kind == "question" else "Approval needed"
    answer = client(connection).chat_postMessage(
        channel=channel, text=f"{lead}: {request.title}", blocks=message_blocks(request, interactive=True))
    post = SlackPost.objects.create(org_id=org_id, approval_id=request.id, channel=answer["channel"], ts=answer["ts"])
    request.refresh_from_db(fields=["status"])
    if not request.is_pending:  # decided while the post was on its way: the update found no post to change
        close_post(approval_id=request.id, org_id=org_id)
    return post


def close_post(*, approval_id: UUID | str, org_id: UUID | str) -> bool:
    """Replaces the buttons of a decided request's message with who decided and when, for everyone."""
    connection, request = connection_of(org_id), _request(org_id, approval_id)
    post = SlackPost.objects.filter(org_id=org_id, approval_id=approval_id, closed_at__isnull=True).first()
    if connection is None or request is None or post is None or request.is_pending:
        return False
    client(connection).chat_update(channel=post.channel, ts=post.ts, text=decided_text(request),
                                   blocks=message_blocks(request, interactive=False))
    SlackPost.objects.filter(id=post.id).update(closed_at=timezone.now(), updated_at=timezone.now())
    return True


def nudge_thread(*, request: Any, emails: list[str], reason: str) -> bool:
    """A reply in the request's Slack thread naming the people asked (a reminder or an escalation),
    each mentioned when Slack knows their email (users.lookupByEmail). False when there is no post."""
    connection = connection_of(request.org_id)
    post = SlackPost.objects.filter(org_id=request.org_id, approval_id=request.id, closed_at__isnull=True).first()
    if connection is None or post is None:
        return False
    api = client(connection)
    names = []
    for email in emails:
        try:
            names.append(f"<@{api.users_lookupByEmail(email=email)['user']['id']}>")
        except SlackError:
            names.append(email)
    lead = {"reminder": "Reminder: this still waits and expires soon", "escalation": "Escalated"}[reason]
    api.chat_postMessage(channel=post.channel, thread_ts=post.ts, reply_broadcast=reason == "escalation",
                         text=f"{lead}: {', '.join(names)}, please decide.")
    return True


# --- interactions ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interaction:
    """What Slack asked for, already verified: who (as a member actor), which request, which decision."""

    connection: SlackConnection
    actor: Actor
    approval_id: str
    decision: str
    comment: str


def verify(connection: SlackConnection, *, body: bytes, headers: dict[str, str]) -> bool:
    """Slack's v0 signature over the raw body, on a timestamp at most five minutes old."""
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(signing_secret=connection.credentials["signing_secret"])
    try:
        return verifier.is_valid_request(body, headers)
    except (ValueError, UnicodeDecodeError):  # a timestamp that is no number, a body that is no text
        return False


def member_for(connection: SlackConnection, slack_user_id: str, *, deciding: bool = True) -> Actor:
    """The member this Slack user is, by the email Slack has verified; with `deciding`, one who may decide
    approvals (a question's group is checked by the answer itself). Raises PermissionDenied."""

    try:
        user = client(connection).users_info(user=slack_user_id)["user"]
    except SlackError as exc:
        raise PermissionDenied(f"Slack did not say who you are ({exc.error}).") from None
    email = (user.get("profile") or {}).get("email", "")
    if not email or not user.get("is_email_confirmed"):
        raise PermissionDenied("Your Slack account has no verified email, so Airlock cannot tell who you are.")
    membership = (Membership.objects.select_related("user")
                  .filter(org_id=connection.org_id, user__email__iexact=email).first())
    if membership is None:
        raise PermissionDenied(f"{email} is not a member of this Airlock organisation.")
    actor = Actor(org_id=connection.org_id, role=membership.role, label=f"{membership.user.email} (Slack)",
                  user_id=membership.user_id)
    if deciding and not actor.can("approvals.decide"):
        raise PermissionDenied(f"Your role ({membership.role}) does not allow deciding approvals.")
    return actor


def open_answer_form(connection: SlackConnection, *, trigger_id: str, approval_id: str) -> None:
    """A modal asking for the answer the agent gets instead of the call."""
    client(connection).views_open(trigger_id=trigger_id, view={
        "type": "modal", "callback_id": "airlock_respond", "private_metadata": approval_id,
        "title": {"type": "plain_text", "text": "Answer instead"},
        "submit": {"type": "plain_text", "text": "Send to the agent"},
        "blocks": [{"type": "input", "block_id": "answer", "label": {"type": "plain_text", "text": "Your answer"},
                    "element": {"type": "plain_text_input", "action_id": "answer", "multiline": True}}]})


def open_question_form(connection: SlackConnection, *, trigger_id: str, request: Any) -> None:
    """A modal showing the question and asking for the answer."""
    question = (request.context or {}).get("question", request.title)
    client(connection).views_open(trigger_id=trigger_id, view={
        "type": "modal", "callback_id": "airlock_answer", "private_metadata": str(request.id),
        "title": {"type": "plain_text", "text": "Answer the question"},
        "submit": {"type": "plain_text", "text": "Send the answer"},
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": f">{question[:ARGUMENTS_SHOWN]}"}},
                   {"type": "input", "block_id": "answer", "label": {"type": "plain_text", "text": "Your answer"},
                    "element": {"type": "plain_text_input", "action_id": "answer", "multiline": True}}]})


def _form_text(payload: dict[str, Any]) -> str:
    values = (((payload.get("view") or {}).get("state") or {}).get("values") or {}).get("answer") or {}
    return ((values.get("answer") or {}).get("value") or "").strip()


def handle_question(connection: SlackConnection, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The Answer button (opens the form, for a member in the question's group) or the form's submission
    (answers as the member through runs' `questions.answer`). Errors go back into the form, or to the
    person alone in the channel."""
    from apps.approvals.questions import may_answer  # later app: approvals notify through this app
    from apps.runs.questions import answer  # later app: runs notify through this app

    submitted = payload.get("type") == "view_submission"
    approval_id = (payload["view"].get("private_metadata", "") if submitted
                   else ((payload.get("actions") or [{}])[0]).get("value", ""))
    try:
        actor = member_for(connection, (payload.get("user") or {}).get("id", ""), deciding=False)
        if not submitted:
            request = _request(connection.org_id, approval_id) if _is_uuid(approval_id) else None
            if request is None or request.kind != "question":
                raise NotFound("No such question.")
            if not may_answer(actor, request):
                raise PermissionDenied(f"This question is for {request.context.get('ask') or 'approvers'}; "
                                       f"your role ({actor.role}) is not among them.")
            if not request.is_pending:
                raise Conflict(decided_text(request))
            open_question_form(connection, trigger_id=payload.get("trigger_id", ""), request=request)
            return None
        answer(actor=actor, approval_id=approval_id, text=_form_text(payload))
    except (Conflict, PermissionDenied, ValidationFailed, NotFound) as exc:
        if submitted:
            return {"response_action": "errors", "errors": {"answer": exc.message}}
        tell(connection, payload, exc.message)
    return None


def _is_uuid(value: str) -> bool:
    try:
        UUID(str(value))
    except ValueError:
        return False
    return True


def handle_interaction(*, connection_id: UUID | str, body: bytes, headers: dict[str, str],
                       payload: dict[str, Any]) -> dict[str, Any] | None:
    """One verified interaction: a button (approve / reject; answer opens the form) or the answer
    form's submission. Decides through runs' decide_approval as the member. Returns the JSON for
    Slack's HTTP answer (None: an empty 200). Raises PermissionDenied for a bad signature or
    timestamp, and for a person who may not decide; Conflict when the request was decided."""
    from apps.runs.decisions import decide_approval  # later app: runs notify through this app

    connection = SlackConnection.objects.filter(id=connection_id, enabled=True).first()
    if connection is None or not verify(connection, body=body, headers=headers):
        raise PermissionDenied("The request's Slack signature or timestamp is not valid.")
    kind = payload.get("type")
    user_id = (payload.get("user") or {}).get("id", "")
    first = (payload.get("actions") or [{}])[0] if kind == "block_actions" else {}
    if first.get("action_id") == "airlock_answer" or (
            kind == "view_submission" and (payload.get("view") or {}).get("callback_id") == "airlock_answer"):
        return handle_question(connection, payload)
    if kind == "block_actions":
        action = (payload.get("actions") or [{}])[0]
        decision, approval_id, comment = ACTIONS.get(action.get("action_id", "")), action.get("value", ""), ""
        if decision is None:
            return None
    elif kind == "view_submission" and (payload.get("view") or {}).get("callback_id") == "airlock_respond":
        view = payload["view"]
        approval_id, decision = view.get("private_metadata", ""), "respond"
        values = ((view.get("state") or {}).get("values") or {}).get("answer") or {}
        comment = ((values.get("answer") or {}).get("value") or "").strip()
        if not comment:
            return {"response_action": "errors", "errors": {"answer": "Write the answer the agent should get."}}
    else:
        return None
    try:
        actor = member_for(connection, user_id)
        if kind == "block_actions" and decision == "respond":
            open_answer_form(connection, trigger_id=payload.get("trigger_id", ""), approval_id=approval_id)
            return None
        decide_approval(actor=actor, approval_id=approval_id, decision=decision, comment=comment)
    except (Conflict, PermissionDenied, ValidationFailed, NotFound) as exc:
        # Slack shows nothing of an HTTP error: the person is told why in the channel, only they see it.
        if kind == "view_submission":
            return {"response_action": "errors", "errors": {"answer": exc.message}}
        tell(connection, payload, exc.message)
    return None


def tell(connection: SlackConnection, payload: dict[str, Any], text: str) -> None:
    """A message only the person who clicked sees (why their click did nothing)."""
    channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
    user = (payload.get("user") or {}).get("id")
    if channel and user:
        client(connection).chat_postEphemeral(channel=channel, user=user, text=text)
