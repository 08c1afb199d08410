"""Settings → Notifications: webhooks (URL, events, secret shown once), their deliveries, and email
to approvers."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from apps.core.errors import ValidationFailed
from apps.notifications import selectors, services
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
    if request.method == "POST":
        values = {"name": request.POST.get("name", ""), "url": request.POST.get("url", ""),
                  "events": request.POST.getlist("events"), "secret": request.POST.get("secret", "")}
        try:
            hook, created_secret = services.create_webhook(actor=request.actor, **values)
            values = {"events": ["approval.requested"]}
            messages.success(request, f"Webhook “{hook.name}” added. Copy its signing secret now: "
                                      "it is not shown again.")
        except ValidationFailed as exc:
            errors, status = exc.errors, 422
    context = {"webhooks": selectors.org_webhooks(org_id=org_id),
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
