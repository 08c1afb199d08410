"""Websocket consumers: authenticate on connect, then only forward.

A consumer never decides anything and never writes: it turns an event (a name and ids) into
the same partial the page renders and sends it for htmx to swap out-of-band.

Access is not only checked at connect: every socket also joins its viewer's own group, and when
their sign-in or membership changes (`ACCESS_CHANGED`) it checks again and closes with 4403, or
carries on with the new role.
"""

from __future__ import annotations

import asyncio
import json
from importlib import import_module
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string

from apps.accounts import selectors
from apps.accounts.actors import Actor, member_actor
from apps.accounts.models import Membership
from apps.core.realtime import ACCESS_CHANGED, org_group, run_group, user_group
from apps.web.badges import pending_approvals

FORBIDDEN = 4403
REPLAY_BATCH = 500
PARTIALS_DELAY_S = 0.1

# event name -> the partial that renders it
PARTIALS = {
    "inbox.count": "web/partials/_inbox_badge.html",
    "system.worker_answered": "web/partials/_worker_check.html",
    "budget.threshold": "web/partials/_budget_banner.html",
}


def _session_user_id(session_key: str | None) -> int | None:
    """Who this session signs in now, read afresh from the session store as a request would be: None
    once it was signed out, or when a password change elsewhere invalidated it."""
    from django.contrib.auth import get_user

    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(SimpleNamespace(session=store))
    return user.pk if user.is_authenticated else None


class MemberConsumer(AsyncWebsocketConsumer):
    """A socket for one member of one organisation. On connect: accept, then close with 4403 (so the
    browser learns why and stops retrying) unless the signed-in user is a member of the page's
    organisation; else join the page's groups and the user's own. On `ACCESS_CHANGED`: check the
    session and the membership again; close with 4403 when either is gone, else take the new role.

    A page's consumer says which organisation it belongs to (`page_org_id`), which groups it listens
    to (`page_groups`), what it sends on joining (`joined`) and how it forwards an event (`forward`)."""

    membership: Membership | None = None
    actor: Actor | None = None
    joined_groups: tuple[str, ...] = ()

    def page_org_id(self) -> str | None:
        """The organisation this page shows (runs in a thread: may read the database)."""
        return str(self.scope["url_route"]["kwargs"]["org_id"])

    def page_groups(self) -> list[str]:
        return [org_group(self.org_id)]

    async def joined(self) -> None:
        """What the page needs right after connecting (a reconnect's catch-up)."""

    async def forward(self, message: dict) -> None:
        raise NotImplementedError

    async def connect(self) -> None:
        await self.accept()
        membership = await database_sync_to_async(self._membership_at_connect)()
        if membership is None:
            await self.close(code=FORBIDDEN)
            return
        self._adopt(membership)
        self.joined_groups = (user_group(membership.user_id), *self.page_groups())
        for group in self.joined_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.joined()

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Clients do not send: every write is an HTTP POST with CSRF."""

    async def realtime_event(self, message: dict) -> None:
        if self.membership is None:  # closed by a re-check: messages already queued go nowhere
            return
        if message["event"] == ACCESS_CHANGED:
            await self._recheck()
            return
        await self.forward(message)

    @property
    def org_id(self):
        return self.membership.org_id if self.membership is not None else None

    def _adopt(self, membership: Membership) -> None:
        self.membership = membership
        self.actor = member_actor(membership)

    def _membership_at_connect(self) -> Membership | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        org_id = self.page_org_id()
        return selectors.membership_for(user_id=user.pk, org_id=org_id) if org_id else None

    def _membership_now(self) -> Membership | None:
        session = self.scope.get("session")
        if _session_user_id(getattr(session, "session_key", None)) != self.membership.user_id:
            return None
        return selectors.membership_for(user_id=self.membership.user_id, org_id=self.membership.org_id)

    async def _recheck(self) -> None:
        membership = await database_sync_to_async(self._membership_now)()
        if membership is None:
            await self._leave()
            await self.close(code=FORBIDDEN)
            return
        self._adopt(membership)

    async def _leave(self) -> None:
        self.membership = None
        for group in self.joined_groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined_groups = ()


def _budget_alerts(org_id) -> dict:
    """The banner's context, read as the page's context processor reads it."""
    from apps.costs import selectors as costs

    return {"budget_alerts": costs.recent_alerts(org_id=org_id)}


class OrgConsumer(MemberConsumer):
    """Live updates for every page of one organisation (badges, the budget banner, system checks)."""

    async def joined(self) -> None:
        count = await database_sync_to_async(pending_approvals)(org_id=self.org_id)
        await self.send(text_data=render_to_string(PARTIALS["inbox.count"], {"inbox_count": count, "oob": True}))

    async def forward(self, message: dict) -> None:
        template = PARTIALS.get(message["event"])
        if template is None:
            return
        context = {**message["data"], "oob": True}
        if message["event"] == "inbox.count":
            context["inbox_count"] = message["data"].get("count", 0)
        if message["event"] == "system.worker_answered":
            context["state"] = "answered"
        if message["event"] == "budget.threshold":
            context.update(await database_sync_to_async(_budget_alerts)(self.org_id))
        await self.send(text_data=render_to_string(template, context))


def _run_partials(run_id: str, org_id, actor=None) -> str:
    """The run page's header and step tree, rendered as the page renders them, for an out-of-band swap."""
    from apps.runs import selectors as runs
    from apps.web.views.runs import run_context

    run = runs.get_run(org_id=org_id, run_id=run_id)
    context = {**run_context(run, actor), "oob": True}
    return (render_to_string("web/runs/_header.html", context) + render_to_string("web/runs/_tree.html", context))


def _run_org_id(run_id: str) -> str | None:
    """The run's organisation, or None (a missing run and another organisation's look the same)."""
    from apps.runs.models import Run

    return Run.objects.filter(id=run_id).values_list("org_id", flat=True).first()


def _events_after(run_id: str, after: int, limit: int = REPLAY_BATCH) -> list[dict]:
    """The run's events after `after`, in seq order: the table is the truth, the layer only nudges."""
    from apps.runs.models import RunEvent

    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit]
    return [{"seq": e.seq, "type": e.type, "data": e.data, "at": e.at.isoformat() if e.at else None} for e in rows]


def _query(scope) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}


class RunConsumer(MemberConsumer):
    """One run's page. On connect, and on every nudge, sends each event after the last one this
    socket sent, in seq order, as JSON frames: the event the nudge carries when it is the next one,
    else every event after the last one sent, read from the table. Then the refreshed header and step
    tree, once per burst (`PARTIALS_DELAY_S` after the first event of it: rendering them is the slow
    part, and an event frame never waits behind it). The client's `last_seq` makes reloads and
    reconnects lose nothing; dropped or coalesced layer messages lose nothing either, because a gap
    sends the socket to the table."""

    render_task: asyncio.Task | None = None
    render_wanted = False

    def page_org_id(self) -> str | None:
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        return _run_org_id(self.run_id)

    def page_groups(self) -> list[str]:
        return [run_group(self.run_id)]

    async def joined(self) -> None:
        try:
            self.last_seq = max(0, int(_query(self.scope).get("last_seq", 0)))
        except ValueError:
            self.last_seq = 0
        await self._catch_up()

    async def disconnect(self, code: int) -> None:
        await super().disconnect(code)
        if self.render_task is not None:
            self.render_task.cancel()

    async def forward(self, message: dict) -> None:
        seq = int(message["data"].get("seq") or 0)
        if message["event"] != "run.event" or seq <= self.last_seq:
            return
        carried = message["data"].get("carried")
        if carried is not None and seq == self.last_seq + 1:
            await self.send(text_data=json.dumps(carried, default=str))
            self.last_seq = seq
            self._render_soon()
            return
        await self._catch_up()

    async def _catch_up(self) -> None:
        sent = False
        while True:
            events = await database_sync_to_async(_events_after)(self.run_id, self.last_seq)
            for event in events:
                await self.send(text_data=json.dumps(event, default=str))
                self.last_seq = event["seq"]
                sent = True
            if len(events) < REPLAY_BATCH:
                break
        if sent:
            self._render_soon()

    def _render_soon(self) -> None:
        self.render_wanted = True  # also when a render is under way: it may have read the run before this event
        if self.render_task is None or self.render_task.done():
            self.render_task = asyncio.create_task(self._render_partials())

    async def _render_partials(self) -> None:
        while self.render_wanted:
            await asyncio.sleep(PARTIALS_DELAY_S)
            self.render_wanted = False
            if self.membership is None:  # access ended while it waited
                return
            html = await database_sync_to_async(_run_partials)(self.run_id, self.org_id, self.actor)
            await self.send(text_data=html)


# --- the inbox and the run list ----------------------------------------------------------------------

def _since(value: str | None):
    from django.utils.dateparse import parse_datetime

    try:
        return parse_datetime(value) if value else None
    except ValueError:
        return None


def _inbox_frames(actor, filters: dict, approval_ids: list[str] | None = None, since=None) -> list[str]:
    """Upserts for pending items (added or refreshed) and replacements for decided ones, as JSON frames."""
    from django.utils import timezone

    from apps.approvals import selectors as approvals
    from apps.web.views.inbox import inbox_filters, item_context

    rows = approvals.org_approvals(org_id=actor.org_id, **inbox_filters(filters))
    if approval_ids is not None:
        rows = rows.filter(id__in=approval_ids)
    elif since is not None:
        rows = rows.filter(updated_at__gt=since)
    else:
        return []
    frames, now = [], timezone.now().isoformat()
    for request in list(rows[:100])[::-1]:
        html = render_to_string("web/inbox/_item.html", item_context(request, actor))
        key = "upsert" if request.is_pending else "replace"
        frames.append(json.dumps({key: f"approval-{request.id}", "into": "#inbox-items", "html": html, "at": now}))
    return frames


class InboxConsumer(MemberConsumer):
    """The inbox page: every change to an item (new, a vote, decided by someone, expired) re-renders
    that item's card for this viewer; a decided item shows who decided instead of its form."""

    async def joined(self) -> None:
        query = _query(self.scope)
        self.filters = {k: query[k] for k in ("crew", "agent", "server", "risk", "kind") if query.get(k)}
        since = _since(query.get("since"))
        if since is not None:  # a reconnect: what changed while away
            for frame in await database_sync_to_async(_inbox_frames)(self.actor, self.filters, since=since):
                await self.send(text_data=frame)

    async def forward(self, message: dict) -> None:
        if message["event"] != "inbox.changed":
            return
        frames = await database_sync_to_async(_inbox_frames)(self.actor, self.filters,
                                                              [message["data"]["approval_id"]])
        for frame in frames:
            await self.send(text_data=frame)


def _status_frames(org_id, run_ids: list[str] | None = None, since=None) -> list[str]:
    from django.utils import timezone

    from apps.runs.models import Run

    runs = Run.objects.filter(org_id=org_id)
    if run_ids is not None:
        runs = runs.filter(id__in=run_ids)
    elif since is not None:
        runs = runs.filter(updated_at__gt=since).order_by("-updated_at")[:200]
    else:
        return []
    now = timezone.now().isoformat()
    return [json.dumps({"replace": f"run-status-{run_id}", "at": now,
                        "html": render_to_string("web/runs/_live_status.html", {"run_id": run_id, "status": status})})
            for run_id, status in runs.values_list("id", "status")]


class RunListConsumer(MemberConsumer):
    """The run list: each status change replaces that run's status badge, when it is on the page."""

    async def joined(self) -> None:
        since = _since(_query(self.scope).get("since"))
        if since is not None:
            for frame in await database_sync_to_async(_status_frames)(self.org_id, since=since):
                await self.send(text_data=frame)

    async def forward(self, message: dict) -> None:
        if message["event"] != "run.status":
            return
        for frame in await database_sync_to_async(_status_frames)(self.org_id, [message["data"]["run_id"]]):
            await self.send(text_data=frame)


# --- the dashboard ---------------------------------------------------------------------------------

# Org events that change a dashboard tile (approvals, runs, spend, server health, the checklist).
DASHBOARD_EVENTS = frozenset({"inbox.count", "inbox.changed", "run.status", "server.synced", "server.deleted",
                              "tool.changed", "budget.threshold"})


def _dashboard_tiles(actor) -> str:
    from apps.web.home import dashboard_context

    return render_to_string("web/dashboard.html#tiles", {**dashboard_context(actor), "oob": True})


class DashboardConsumer(MemberConsumer):
    """The dashboard: on connect (so a reconnect catches up) and on every org event that moves a
    number, re-renders the tiles as the page does, for an out-of-band swap."""

    async def joined(self) -> None:
        await self.send(text_data=await database_sync_to_async(_dashboard_tiles)(self.actor))

    async def forward(self, message: dict) -> None:
        if message["event"] in DASHBOARD_EVENTS:
            await self.send(text_data=await database_sync_to_async(_dashboard_tiles)(self.actor))
