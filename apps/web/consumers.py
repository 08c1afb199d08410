"""Websocket consumers: authenticate on connect, then only forward.

A consumer never decides anything and never writes: it turns an event (a name and ids) into
the same partial the page renders and sends it for htmx to swap out-of-band.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from apps.accounts import selectors
from apps.core.realtime import org_group, run_group
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


def _run_partials(run_id: str, org_id) -> str:
    """The run page's header and step tree, rendered as the page renders them, for an out-of-band swap."""
    from apps.runs import selectors as runs
    from apps.web.views.runs import run_context

    run = runs.get_run(org_id=org_id, run_id=run_id)
    context = {**run_context(run), "oob": True}
    return (render_to_string("web/runs/_header.html", context) + render_to_string("web/runs/_tree.html", context))


def _run_access(user_id: int, run_id: str):
    """The viewer's membership in the run's organisation, or None (missing and not-yours look the same)."""
    from apps.runs.models import Run

    org_id = Run.objects.filter(id=run_id).values_list("org_id", flat=True).first()
    return selectors.membership_for(user_id=user_id, org_id=org_id) if org_id else None


def _events_after(run_id: str, after: int) -> int:
    from apps.runs.models import RunEvent

    latest = RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("-seq").values_list("seq", flat=True)
    return latest.first() or after


class RunConsumer(AsyncWebsocketConsumer):
    """One run's page: replays what happened after the client's last seen event (from the table), then
    forwards each new event as the refreshed header and step tree."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        membership = None
        if user is not None and user.is_authenticated:
            membership = await database_sync_to_async(_run_access)(user.pk, self.run_id)
        await self.accept()
        if membership is None:
            await self.close(code=FORBIDDEN)
            return
        self.org_id = membership.org_id
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        query = dict(p.split("=", 1) for p in self.scope.get("query_string", b"").decode().split("&") if "=" in p)
        try:
            self.last_seq = int(query.get("last_seq", 0))
        except ValueError:
            self.last_seq = 0
        latest = await database_sync_to_async(_events_after)(self.run_id, self.last_seq)
        if latest > self.last_seq:  # missed while disconnected: catch up from the table
            await self._send_page(latest)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Clients do not send: every write is an HTTP POST with CSRF."""

    async def realtime_event(self, message: dict) -> None:
        seq = int(message["data"].get("seq") or 0)
        if message["event"] == "run.event" and seq > self.last_seq:
            await self._send_page(seq)

    async def _send_page(self, seq: int) -> None:
        self.last_seq = max(self.last_seq, seq)
        html = await database_sync_to_async(_run_partials)(self.run_id, self.org_id)
        await self.send(text_data=html)
