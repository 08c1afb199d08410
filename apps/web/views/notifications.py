"""Settings → Notifications: webhooks (URL, events, secret shown once), their deliveries, email
to approvers, and the Slack app that posts held calls for a decision (token and secret write-only)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from apps.core.errors import ValidationFailed
from apps.crews import selectors as crews
from apps.notifications import routing, selectors, services, slack
from apps.notifications.models import EVENTS
from apps.web.access import member_required, post_only


@member_required("members.manage")
def notifications(request: HttpRequest) -> HttpResponse:
    org_id = request.actor.org_id
    values, errors, status, created_secret = {"events": ["approval.requested"]}, {}, 200, ""
    if request.method == "POST" and request.POST.get("form") == "email":
        services.set_email_events(actor=request.actor, events=request.POST.getlist("email_events"))
        messages.success(request, "Email settings saved.")
        return redirect("web:notifications")
    slack_errors: dict[str, str] = {}
    if request.method == "POST" and request.POST.get("form") == "slack":
        try:
            slack.connect(actor=request.actor, bot_token=request.POST.get("bot_token", ""),
                          signing_secret=request.POST.get("signing_secret", ""),
                          channel=request.POST.get("channel", ""),
                          risk_channels={risk: request.POST.get(f"channel_{risk}", "") for risk in slack.RISKS},
                          crew_channels={k[len("crew_"):]: v for k, v in request.POST.items() if k.startswith("crew_")})
            messages.success(request, "Slack connected: held calls are posted there for a decision.")
            return redirect("web:notifications")
        except ValidationFailed as exc:
            slack_errors, status = exc.errors, 422
    elif request.method == "POST" and request.POST.get("form") not in ("slack_disconnect", "route", "route_delete"):
        values = {"name": request.POST.get("name", ""), "url": request.POST.get("url", ""),
                  "events": request.POST.getlist("events"), "secret": request.POST.get("secret", "")}
        try:
            hook, created_secret = services.create_webhook(actor=request.actor, **values)
            values = {"events": ["approval.requested"]}
            messages.success(request, f"Webhook “{hook.name}” added. Copy its signing secret now: "
                                      "it is not shown again.")
        except ValidationFailed as exc:
            errors, status = exc.errors, 422
    route_errors: dict[str, str] = {}
    if request.method == "POST" and request.POST.get("form") == "route":
        try:
            routing.set_route(actor=request.actor, crew_id=request.POST.get("crew_id") or None,
                              risk=request.POST.get("risk", ""), people=_emails(request.POST.get("people", "")),
                              channels=request.POST.getlist("channels"),
                              remind_before_minutes=_minutes(request.POST.get("remind_before_minutes")),
                              escalate_after_minutes=_minutes(request.POST.get("escalate_after_minutes")),
                              escalate_to=_emails(request.POST.get("escalate_to", "")))
            messages.success(request, "Approval route saved.")
            return redirect("web:notifications")
        except ValidationFailed as exc:
            route_errors, status = exc.errors, 422
    if request.method == "POST" and request.POST.get("form") == "route_delete":
        routing.delete_route(actor=request.actor, route_id=request.POST.get("route_id", ""))
        messages.success(request, "Approval route deleted.")
        return redirect("web:notifications")
    if request.method == "POST" and request.POST.get("form") == "slack_disconnect":
        slack.disconnect(actor=request.actor)
        messages.success(request, "Slack disconnected.")
        return redirect("web:notifications")
    connection = slack.connection_of(org_id)
    crew_names = {str(c.id): c.name for c in crews.org_crews(org_id=org_id)}
    context = {"routes": [(r, crew_names.get(str(r.crew_id), "any crew") if r.crew_id else "any crew")
                          for r in routing.org_routes(org_id=org_id)],
               "route_errors": route_errors, "route_values": request.POST if route_errors else {},
               "slack": connection, "slack_errors": slack_errors, "crews": crews.org_crews(org_id=org_id),
               "slack_url": (settings.AIRLOCK_BASE_URL.rstrip("/") + reverse(
                   "web:slack_interactions", kwargs={"connection_id": connection.id})) if connection else "",
               "webhooks": selectors.org_webhooks(org_id=org_id),
               "deliveries": selectors.recent_deliveries(org_id=org_id),
               "email_events": selectors.email_events(org_id=org_id), "events": EVENTS,
               "values": values, "errors": errors, "created_secret": created_secret}
    return render(request, "web/notifications/page.html", context, status=status)


@post_only
@member_required("members.manage")
def webhook_delete(request: HttpRequest, webhook_id) -> HttpResponse:
    services.delete_webhook(actor=request.actor, webhook_id=webhook_id)
    messages.success(request, "Webhook deleted.")
    return redirect("web:notifications")


def _emails(text: str) -> list[str]:
    return [e for e in text.replace(",", " ").split() if e]


def _minutes(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return -1  # refused by the service with a field error
