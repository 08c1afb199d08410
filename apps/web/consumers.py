"""Websocket consumers: authenticate on connect, then only forward.

A consumer never decides anything and never writes: it turns an event (a name and ids) into
the same partial the page renders and sends it for htmx to swap out-of-band.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from apps.accounts import selectors
from apps.core.realtime import org_group
from apps.web.badges import pending_approvals

FORBIDDEN = 4403

# event name -> the partial that renders it
PARTIALS = {
    "inbox.count": "web/partials/_inbox_badge.html",
    "system.worker_answered": "web/partials/_worker_check.html",
}


class OrgConsumer(AsyncWebsocketConsumer):
    """Live updates for every page of one organisation (badges, tiles, system checks)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        org_id = str(self.scope["url_route"]["kwargs"]["org_id"])
        membership = None
        if user is not None and user.is_authenticated:
            membership = await database_sync_to_async(selectors.membership_for)(user_id=user.pk, org_id=org_id)
        # Accept, then close with 4403, so the browser learns why and stops retrying.
        await self.accept()
        if membership is None:
            await self.close(code=FORBIDDEN)
            return
        self.group = org_group(org_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        count = await database_sync_to_async(pending_approvals)(org_id=membership.org_id)
        await self.send(text_data=render_to_string(PARTIALS["inbox.count"], {"inbox_count": count, "oob": True}))

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Clients do not send: every write is an HTTP POST with CSRF."""

    async def realtime_event(self, message: dict) -> None:
        template = PARTIALS.get(message["event"])
        if template is None:
            return
        context = {**message["data"], "oob": True}
        if message["event"] == "inbox.count":
            context["inbox_count"] = message["data"].get("count", 0)
        if message["event"] == "system.worker_answered":
            context["state"] = "answered"
        await self.send(text_data=render_to_string(template, context))
