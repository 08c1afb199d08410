"""Slack's interaction requests (button clicks, the answer form): no session and no CSRF token,
authenticated by Slack's signature instead (apps.notifications.slack.verify), over the raw body."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apps.core.errors import PermissionDenied
from apps.notifications import slack
from apps.web.access import post_only


@csrf_exempt
@post_only
def slack_interactions(request: HttpRequest, connection_id) -> HttpResponse:
    body = request.body  # read before the form: the signature covers these exact bytes
    try:
        payload = json.loads(request.POST.get("payload", ""))
    except ValueError:
        return HttpResponse("Expected Slack's form-encoded payload.", status=400, content_type="text/plain")
    try:
        answer = slack.handle_interaction(connection_id=connection_id, body=body, headers=dict(request.headers),
                                          payload=payload)
    except PermissionDenied as exc:
        return HttpResponse(exc.message, status=401, content_type="text/plain")
    return JsonResponse(answer) if answer else HttpResponse(status=200)
