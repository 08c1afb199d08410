"""Notifications: `notify` (the one function other apps call), webhooks, signed deliveries, email.

`notify(org_id=..., event=..., payload=...)` joins the caller's transaction: it writes a
Notification and one WebhookDelivery per enabled webhook subscribed to the event, and on commit
enqueues their delivery (and the approvers' email when the org turned it on for the event).
A delivery that fails is retried with backoff by beat (`retry_due_deliveries`), up to
MAX_ATTEMPTS, then marked failed; every attempt's outcome is stored on the row.

Each POST is signed: `X-Airlock-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`
with `X-Airlock-Timestamp: <unix seconds>`; receivers recompute it and refuse old timestamps.
Webhook URLs go through the egress guard (`apps/core/egress.py`) when saved and at every connect.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.core.mail import send_mail
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.accounts.models import Membership, Organization
from apps.audit import services as audit
from apps.audit.org_secrets import redact_outside
from apps.audit.redaction import redact
from apps.core.egress import guarded_transport, save_time_error
from apps.core.errors import NotFound, ValidationFailed
from apps.core.rows import Columns, fetch
from apps.notifications.approval_links import send_approval_emails
from apps.notifications.models import (
    EVENTS,
    ApprovalRoute,
    DeliveryStatus,
    EmailPreference,
    Notification,
    SlackConnection,
    Webhook,
    WebhookDelivery,
)
from apps.notifications.routing import audience

EVENT_NAME = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")
BACKOFF_S = (30, 120, 600, 1800, 3600)  # after attempt 1, 2, ...; the last repeats
MAX_ATTEMPTS = 6
CLAIM_S = 60  # an attempt in flight holds the row this long (a dead worker's attempt is retried)
TIMEOUT_S = 10
APPROVER_ROLES = ("owner", "admin", "approver")
SLACK_EVENTS = ("approval.requested", "approval.decided")
MAILED_KINDS = ("tool_call", "question")  # held calls and agents' questions: each person's own links, Slack


# --- notify ---------------------------------------------------------------------------------------

def notify(*, org_id: UUID | str, event: str, payload: dict[str, Any], heard: Channels | None = None
           ) -> Notification | None:
    """Tells the org's webhooks (and, when turned on, its approvers by email) that `event` happened.

    Call inside the transaction of the change; nothing is sent unless it commits. `payload` is
    plain JSON (ids and short facts; secrets are redacted). Returns None when nobody listens.
    `heard`: the org's `Channels`, when the caller read them with its own reads (`channels_statement`).
    """
    if not EVENT_NAME.match(event):
        raise ValueError(f"Event names are dotted lowercase words, not {event!r}.")

    heard = heard or channels(org_id)
    hooks = ([h for h in Webhook.objects.filter(org_id=org_id, enabled=True) if h.wants(event)]
             if heard.webhooks else [])
    emails = _email_recipients(org_id, event, payload, mailed=heard.mailed)
    slack = event in SLACK_EVENTS and payload.get("kind") in MAILED_KINDS and heard.slack
    if event == "approval.requested" and heard.routes and (routed := audience(org_id, payload)) is not None:
        # the crew's or the risk's route decides
        emails, slack = routed.emails, slack and routed.slack
    if slack:  # posts the held call, or updates its message once decided (apps.notifications.slack)
        approval_id = str(payload["approval_id"])
        transaction.on_commit(lambda: _enqueue_slack(org_id, approval_id, event))
    if not hooks and not emails:
        return None
    body = json.loads(json.dumps(redact(payload), cls=DjangoJSONEncoder))
    notification = Notification.objects.create(org_id=org_id, event=event, payload=body, email_to=emails)
    now = timezone.now()
    deliveries = WebhookDelivery.objects.bulk_create(
        [WebhookDelivery(org_id=org_id, webhook=h, notification=notification, next_attempt_at=now) for h in hooks])
    ids = [str(d.id) for d in deliveries]

    def enqueue() -> None:
        from apps.notifications import tasks  # tasks import this module: a top-level import would be a cycle

        for delivery_id in ids:
            tasks.deliver_webhook.delay(delivery_id)
        if emails:
            tasks.send_notification_email.delay(str(notification.id))

    transaction.on_commit(enqueue)
    return notification


def _enqueue_slack(org_id: UUID | str, approval_id: str, event: str) -> None:
    from apps.notifications import tasks  # tasks import this module: a top-level import would be a cycle

    task = tasks.post_to_slack if event == "approval.requested" else tasks.update_slack
    task.delay(str(org_id), approval_id)


@dataclass(frozen=True)
class Channels:
    """What an organisation has set up to hear of its events."""

    webhooks: bool  # an enabled webhook (which events each wants is its own row's)
    mailed: list[str]  # the events its approvers are emailed
    slack: bool  # an enabled Slack connection
    routes: bool  # an approval route (apps.notifications.routing)


def channels(org_id: UUID | str) -> Channels:
    """`Channels` in one statement, built once per process: every decision, held call and finished run asks, and
    most organisations have few of them or none (three reads, one per channel, were a fifth of a decision's
    statements; one query through the ORM, compiling its four subqueries each time, ~2 ms of CPU)."""
    return channels_from(fetch(*channels_statement(org_id)))


def channels_statement(org_id: UUID | str) -> tuple[str, list[Any]]:
    """The statement `channels` sends, for a caller that sends it with its own first reads (one round trip for
    all: `apps.core.rows.fetch_together`); `channels_from` reads its rows."""
    org = Organization._meta.pk.get_db_prep_value(org_id, connection)
    return _channels_read()[1], [org] * 4


def channels_from(rows: list[tuple]) -> Channels:
    mailed = _channels_read()[0]
    webhooks, events, slack, routes = rows[0]
    return Channels(webhooks=bool(webhooks), mailed=mailed.values([events])[0] or [], slack=bool(slack),
                    routes=bool(routes))


@functools.cache
def _channels_read() -> tuple[Columns, str]:
    mailed = Columns(EmailPreference, ["events"], "e")
    quote = connection.ops.quote_name
    hooks, slack, routes = (quote(model._meta.db_table) for model in (Webhook, SlackConnection, ApprovalRoute))
    return mailed, (f"SELECT EXISTS (SELECT 1 FROM {hooks} w WHERE w.org_id = %s AND w.enabled), "  # noqa: S608
                    f"(SELECT {mailed.sql} FROM {mailed.table} e WHERE e.org_id = %s LIMIT 1), "
                    f"EXISTS (SELECT 1 FROM {slack} s WHERE s.org_id = %s AND s.enabled), "
                    f"EXISTS (SELECT 1 FROM {routes} r WHERE r.org_id = %s)")


def _email_recipients(org_id: UUID | str, event: str, payload: dict[str, Any], *, mailed: list[str]) -> list[str]:
    """The approvers, or for a new question the people of its group (`ask`), when the org mails the event."""
    if event not in mailed:
        return []
    roles = APPROVER_ROLES
    if event == "approval.requested" and payload.get("kind") == "question":
        from apps.approvals.questions import GROUP_ROLES  # later app: approvals notify through this app

        roles = GROUP_ROLES.get(payload.get("ask") or "approvers") or APPROVER_ROLES
    return sorted(Membership.objects.filter(org_id=org_id, role__in=roles).values_list("user__email", flat=True))


# --- webhooks -------------------------------------------------------------------------------------

def _clean(name: str, url: str, events: list[str]) -> dict[str, Any]:
    errors = {}
    name, url = (name or "").strip(), (url or "").strip()
    if not name:
        errors["name"] = "Give the webhook a name."
    if not url:
        errors["url"] = "Enter the URL to POST to."
    elif message := save_time_error(url):  # a name that does not resolve yet passes; every connect is checked
        errors["url"] = message
    events = sorted(set(events or []))
    unknown = [e for e in events if e != "*" and e not in EVENTS]
    if not events:
        errors["events"] = "Choose at least one event."
    elif unknown:
        errors["events"] = f"Unknown events: {', '.join(unknown)}."
    if errors:
        raise ValidationFailed("The webhook could not be saved.", errors)
    return {"name": name[:100], "url": url, "events": events}


def create_webhook(*, actor: Actor, name: str, url: str, events: list[str], secret: str = "") -> tuple[Webhook, str]:
    """A new webhook; returns it and its signing secret (generated when not given; shown once)."""
    actor.require("members.manage")
    values = _clean(name, url, events)
    secret = (secret or "").strip() or "whsec_" + secrets.token_urlsafe(32)
    with transaction.atomic():
        hook = Webhook.objects.create(org_id=actor.org_id, secret={"key": secret}, created_by_label=actor.label,
                                      **values)
        audit.record(org_id=actor.org_id, actor=actor, action="webhook.created", target=hook, target_label=hook.name,
                     data={"url": hook.url, "events": hook.events})
    return hook, secret


def delete_webhook(*, actor: Actor, webhook_id: UUID | str) -> None:
    actor.require("members.manage")
    with transaction.atomic():
        hook = Webhook.objects.select_for_update().filter(org_id=actor.org_id, id=webhook_id).first()
        if hook is None:
            raise NotFound("No such webhook.")
        audit.record(org_id=actor.org_id, actor=actor, action="webhook.deleted", target=hook, target_label=hook.name,
                     data={"url": hook.url})
        hook.delete()


def set_email_events(*, actor: Actor, events: list[str]) -> EmailPreference:
    actor.require("members.manage")
    events = sorted({e for e in events or [] if e in EVENTS})
    with transaction.atomic():
        preference, _ = EmailPreference.objects.get_or_create(org_id=actor.org_id)
        preference.events = events
        preference.save(update_fields=["events", "updated_at"])
        audit.record(org_id=actor.org_id, actor=actor, action="notifications.email_changed",
                     target_label="email to approvers", data={"events": events})
    return preference


# --- delivering -----------------------------------------------------------------------------------

def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp` (unix seconds, as a string)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify(secret: str, timestamp: str, body: bytes, signature: str, *, tolerance_s: int = 300) -> bool:
    """For receivers (and tests): a valid signature on a recent timestamp."""
    try:
        fresh = abs(time.time() - int(timestamp)) <= tolerance_s
    except ValueError:
        return False
    return fresh and hmac.compare_digest(sign(secret, timestamp, body), signature)


def body_of(delivery: WebhookDelivery) -> bytes:
    notification = delivery.notification
    return json.dumps({"id": str(notification.id), "event": notification.event, "org_id": str(delivery.org_id),
                       "created_at": notification.created_at.isoformat(), "data": notification.payload},
                      sort_keys=True, separators=(",", ":")).encode()


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=BACKOFF_S[min(attempts, len(BACKOFF_S)) - 1])


def deliver(*, delivery_id: UUID | str) -> str:
    """One attempt, when the row is due (claimed by a conditional update). Returns the row's status,
    or "skipped" when it was not due or someone else holds it."""
    now = timezone.now()
    claimed = WebhookDelivery.objects.filter(id=delivery_id, status=DeliveryStatus.PENDING,
                                             next_attempt_at__lte=now).update(
        attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=CLAIM_S), updated_at=now)
    if not claimed:
        return "skipped"
    delivery = WebhookDelivery.objects.select_related("webhook", "notification").get(id=delivery_id)
    body = body_of(delivery)
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "Airlock-Webhooks/1",
               "X-Airlock-Event": delivery.notification.event, "X-Airlock-Delivery": str(delivery.id),
               "X-Airlock-Timestamp": timestamp,
               "X-Airlock-Signature": sign(delivery.webhook.secret["key"], timestamp, body)}
    status_code, error = None, ""
    try:
        status_code, answer = _run_async(lambda: _post(delivery.webhook.url, body, headers))
        if not 200 <= status_code < 300:
            error = f"The receiver answered HTTP {status_code}" + (f": {answer}" if answer else ".")
    except Exception as exc:  # refused by the egress guard, connection errors, timeouts
        error = f"{type(exc).__name__}: {exc}"
    # the receiver's words (or an error quoting the request) may hold the signing secret or another of the org's
    error = redact_outside(error, org_id=delivery.org_id)[:500]
    fields = {"response_status": status_code, "last_error": error, "updated_at": timezone.now()}
    if not error:
        fields.update(status=DeliveryStatus.DELIVERED, delivered_at=timezone.now(), next_attempt_at=None)
    elif delivery.attempts >= MAX_ATTEMPTS:
        fields.update(status=DeliveryStatus.FAILED, next_attempt_at=None)
    else:
        fields.update(next_attempt_at=timezone.now() + backoff(delivery.attempts))
    WebhookDelivery.objects.filter(id=delivery.id).update(**fields)
    return fields.get("status", DeliveryStatus.PENDING)


def _run_async(make_coroutine):
    """Runs a coroutine to completion from sync code, on its own thread when this one already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coroutine())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make_coroutine())).result()


ANSWER_READ_CHARS = 20_000  # of a receiver's answer; `last_error` keeps its start, cut only after redaction


async def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """(HTTP status, the answer's text on one line)."""
    import httpx2

    async with httpx2.AsyncClient(transport=guarded_transport(), timeout=TIMEOUT_S, follow_redirects=False,
                                  trust_env=False) as client:
        response = await client.post(url, content=body, headers=headers)
        return response.status_code, " ".join(response.text[:ANSWER_READ_CHARS].split())


def retry_due_deliveries() -> int:
    """Beat: one attempt for every pending delivery whose time has come. Returns how many were tried."""
    from apps.notifications import tasks  # tasks import this module: a top-level import would be a cycle

    due = list(WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=timezone.now())
               .values_list("id", flat=True)[:500])
    for delivery_id in due:
        tasks.deliver_webhook.delay(str(delivery_id))
    return len(due)


def send_email(*, notification_id: UUID | str) -> bool:
    """Emails the approvers once (claimed by a conditional update). Returns whether it sent."""
    now = timezone.now()
    if not Notification.objects.filter(id=notification_id, emailed_at__isnull=True).update(emailed_at=now):
        return False
    notification = Notification.objects.get(id=notification_id)
    if not notification.email_to:
        return False
    if notification.event == "approval.requested" and notification.payload.get("kind") in MAILED_KINDS:

        return send_approval_emails(notification=notification) > 0  # each person's own links
    label = EVENTS.get(notification.event, notification.event)
    lines = [f"{label}.", ""] + [f"{k}: {v}" for k, v in sorted(notification.payload.items())
                                 if isinstance(v, str | int | float) and k not in ("arguments",)]
    send_mail(subject=f"[Airlock] {label}", message="\n".join(lines), from_email=None,
              recipient_list=notification.email_to, fail_silently=False)
    return True
