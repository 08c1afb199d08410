"""Websocket consumers: authenticate on connect, then only forward.

A consumer never decides anything and never writes: it turns an event (a name and ids) into
the same partials the page renders and sends them as HTML; htmx's ws extension swaps each top-level
element of a message into the page by its id (out of band). That is the browser's only live mechanism.
Every consumer sends its page's live partials on connect too, so a reconnect (after a drop or a
restarted web process) catches up with no cursor kept in the browser.

Access is not only checked at connect: every socket also joins its viewer's own group, and when
their sign-in or membership changes (`ACCESS_CHANGED`) it checks again and closes with 4403, or
carries on with the new role.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import ThreadSensitiveContext
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user
from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime

from apps.accounts import selectors
from apps.accounts.actors import Actor, member_actor
from apps.accounts.models import Membership
from apps.approvals import selectors as approvals
from apps.core.realtime import ACCESS_CHANGED, org_group, run_group, user_group
from apps.costs import selectors as costs
from apps.runs import selectors as runs
from apps.runs.models import FINISHED
from apps.web.badges import pending_approvals
from apps.web.home import dashboard_context
from apps.web.views.inbox import inbox_filters, item_context, moved_items, pending_page
from apps.web.views.runs import run_panels

FORBIDDEN = 4403
PARTIALS_DELAY_S = 0.1
# A page's panels are rendered again at most this often: its new events are sent at once, the step tree, header and
# spend follow within half a second. Renders were most of a web process's CPU with a hundred busy run pages open.
PANELS_EVERY_S = 0.5
# Run pages whose panels a web process renders at once. A render is mostly Python (the GIL): with a hundred
# busy pages rendering together, every socket's new events and the API's requests waited behind them
# (bench/load.py). A page that waits for its turn renders once for everything that arrived meanwhile.
PANEL_RENDERS = 4
# Nudges are best effort: a layer drops messages for a web process that fell behind, and a Redis restart loses
# those in flight. Every page keeps up (`MemberConsumer.keep_up`): one that has heard nothing for CATCH_UP_S reads
# what it shows from the database itself, then waits twice as long each time nothing was new, up to CATCH_UP_MAX_S
# (a run that waits a day for a person costs its open page a small query a minute).
CATCH_UP_S = 2.0
CATCH_UP_MAX_S = 60.0
_render_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def render_slot() -> asyncio.Semaphore:
    """This process's (this event loop's) turns to render run panels."""
    loop = asyncio.get_running_loop()
    if loop not in _render_slots:
        _render_slots[loop] = asyncio.Semaphore(PANEL_RENDERS)
    return _render_slots[loop]

# event name -> the partial that renders it
PARTIALS = {
    "inbox.count": "web/partials/_inbox_badge.html",
    "system.worker_answered": "web/partials/_worker_check.html",
    "budget.threshold": "web/partials/_budget_banner.html",
}


def _session_user_id(session_key: str | None) -> int | None:
    """Who this session signs in now, read afresh from the session store as a request would be: None
    once it was signed out, or when a password change elsewhere invalidated it."""
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
    heard_at = 0.0  # when the layer last brought this socket a message (loop time)
    keep_up_task: asyncio.Task | None = None

    async def __call__(self, scope, receive, send) -> None:
        # Each socket's database work and renders run on a thread of its own, as Django gives each request
        # one. Outside such a context every socket of the process shares one thread, and under load
        # (bench/load.py: 100 run pages) a run's new events waited there behind other pages' panel renders.
        async with ThreadSensitiveContext():
            await super().__call__(scope, receive, send)

    def page_org_id(self) -> str | None:
        """The organisation this page shows (runs in a thread: may read the database)."""
        return str(self.scope["url_route"]["kwargs"]["org_id"])

    def page_groups(self) -> list[str]:
        return [org_group(self.org_id)]

    async def joined(self) -> None:
        """What the page needs right after connecting (a reconnect's catch-up)."""

    async def forward(self, message: dict) -> None:
        raise NotImplementedError

    async def catch_up(self) -> bool | None:
        """What the page reads for itself when the layer has been quiet for a while (`keep_up`): whether anything
        had moved, or None once nothing more can move."""
        return None

    def keep_up(self) -> None:
        """From now on, catch up whenever the layer has brought nothing for CATCH_UP_S (see there)."""
        self.heard_at = asyncio.get_running_loop().time()
        self.keep_up_task = asyncio.create_task(self._keep_up())

    async def _keep_up(self) -> None:
        loop, wait = asyncio.get_running_loop(), CATCH_UP_S
        while self.membership is not None:
            heard = self.heard_at
            await asyncio.sleep(max(0.0, heard + wait - loop.time()))
            if self.membership is None:
                return
            if self.heard_at != heard:  # a message came meanwhile: the layer delivers; wait from then
                wait = CATCH_UP_S
                continue
            moved = await self.catch_up()
            if moved is None:
                return
            self.heard_at = loop.time()
            wait = CATCH_UP_S if moved else min(wait * 2, CATCH_UP_MAX_S)

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
        self.updating = asyncio.Lock()  # a catch-up and a forwarded event read and send one at a time, in order
        await self.joined()

    async def disconnect(self, code: int) -> None:
        await self._leave()
        if self.keep_up_task is not None:
            self.keep_up_task.cancel()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Clients do not send: every write is an HTTP POST with CSRF."""

    async def dispatch(self, message: dict) -> None:
        """channels' own, without its hop to the socket's thread before every message to close stale database
        connections: every database call here goes through `database_sync_to_async`, which closes them around
        the call itself. The hop waited for the GIL wherever a panel render held it (bench/run.py --only events)."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def realtime_event(self, message: dict) -> None:
        self.heard_at = asyncio.get_running_loop().time()
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
    return {"budget_alerts": costs.recent_alerts(org_id=org_id)}


def _alerts_shown(alerts) -> tuple:
    """What the budget banner shows of `alerts`: it changes when one is added or another threshold is reached."""
    return tuple((alert.id, alert.threshold) for alert in alerts)


class OrgConsumer(MemberConsumer):
    """Live updates for every page of one organisation (badges, the budget banner, system checks). The inbox badge
    and the banner keep up (`catch_up`); the worker check answers a click, which the person can repeat."""

    inbox_count: int | None = None  # what the badge shows
    alerts: tuple = ()  # what the banner shows (`_alerts_shown`)

    async def joined(self) -> None:
        count = await database_sync_to_async(pending_approvals)(org_id=self.org_id)
        self.alerts = _alerts_shown((await database_sync_to_async(_budget_alerts)(self.org_id))["budget_alerts"])
        async with self.updating:
            await self._send_badge(count)
        self.keep_up()

    async def forward(self, message: dict) -> None:
        template = PARTIALS.get(message["event"])
        if template is None:
            return
        if message["event"] == "inbox.count":  # a nudge: the badge is read here, as the page reads it
            count = await database_sync_to_async(pending_approvals)(org_id=self.org_id)
            async with self.updating:
                await self._send_badge(count)
            return
        context = {**message["data"], "oob": True}
        if message["event"] == "system.worker_answered":
            context["state"] = "answered"
        if message["event"] == "budget.threshold":
            context.update(await database_sync_to_async(_budget_alerts)(self.org_id))
            self.alerts = _alerts_shown(context["budget_alerts"])
        await self.send(text_data=render_to_string(template, context))

    async def catch_up(self) -> bool:
        """The badge and the banner read again; each sent when it is not what the page shows."""
        count = await database_sync_to_async(pending_approvals)(org_id=self.org_id)
        banner = await database_sync_to_async(_budget_alerts)(self.org_id)
        async with self.updating:
            moved = await self._send_badge(count)
            if _alerts_shown(banner["budget_alerts"]) != self.alerts:
                self.alerts = _alerts_shown(banner["budget_alerts"])
                await self.send(text_data=render_to_string(PARTIALS["budget.threshold"], {**banner, "oob": True}))
                moved = True
        return moved

    async def _send_badge(self, count: int) -> bool:
        """The badge, unless it already shows `count`; whether it was sent."""
        if count == self.inbox_count:
            return False
        self.inbox_count = count
        await self.send(text_data=render_to_string(PARTIALS["inbox.count"], {"inbox_count": count, "oob": True}))
        return True


def _query(scope) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}


def _events_after(run_id: str, after: int) -> list[dict]:
    """The run's events after `after`, oldest first: the table is the truth, a nudge only says there is more."""
    return [{"seq": e.seq, "type": e.type, "at": e.at} for e in runs.events_after(run_id=run_id, after=after)]


class RunConsumer(MemberConsumer):
    """One run's page. On connect, every live panel as it stands (web/runs/_live.html). On each nudge,
    first the events the page has not been sent, added on top of its "Live events" list at once (the
    event the nudge carries when it is the next one, else read from the table); then, once per burst
    (`PARTIALS_DELAY_S` after its first nudge, and no sooner than `PANELS_EVERY_S` after the last: rendering is
    the slow part, and an event never waits behind it), every panel again, read from the database, once the
    process has a render slot free (`PANEL_RENDERS`). Dropped or coalesced nudges lose nothing: a gap sends the
    socket to the table, a quiet layer too (`CATCH_UP_S`), and each render reads the whole state."""

    render_task: asyncio.Task | None = None
    render_wanted = False
    last_seq = 0  # the newest event this socket has sent
    rendered_at = float("-inf")  # when the panels were last sent again (loop time)

    def page_org_id(self) -> str | None:
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        return runs.run_org_id(self.run_id)

    def page_groups(self) -> list[str]:
        return [run_group(self.run_id)]

    async def joined(self) -> None:
        try:  # the newest event the page was rendered with: nothing to send when the run has not moved since
            rendered = int(_query(self.scope).get("seq", ""))
        except ValueError:
            rendered = None
        if rendered is not None and rendered == await database_sync_to_async(runs.last_event_seq)(
                org_id=self.org_id, run_id=self.run_id):
            # A page just loaded, and its run has not moved since: it needs nothing. Rendering every panel only to
            # find that was most of what a page view's socket cost its web process. Read after joining the run's
            # group, as a render would be: an event committed meanwhile is told to this socket.
            self.last_seq = rendered
        else:
            # Not behind the render slots: until `connect` returns the socket hears nothing, so its run's events
            # would wait for every other page's render (bench/load.py: event -> frame p50 2 s -> 8 s).
            await self._send_panels(first=True, unless_at=rendered)
        self.keep_up()

    async def disconnect(self, code: int) -> None:
        await super().disconnect(code)
        if self.render_task is not None:
            self.render_task.cancel()

    async def forward(self, message: dict) -> None:
        if message["event"] != "run.event":
            return
        seq = int(message["data"].get("seq") or 0)
        if seq <= self.last_seq:  # already shown (a nudge may arrive after the render that included it)
            return
        carried = message["data"].get("carried")
        async with self.updating:
            if carried is not None and seq == self.last_seq + 1:
                events = [{**carried, "at": parse_datetime(carried["at"]) if carried.get("at") else None}]
            else:
                events = await database_sync_to_async(_events_after)(self.run_id, self.last_seq)
            await self._add(events)
        self._render_soon()

    async def _add(self, events: list[dict]) -> bool:
        """Adds on top of the page's event list those it has not been sent; whether there were any."""
        events = [e for e in events if e["seq"] > self.last_seq]  # another nudge may have sent them meanwhile
        if events:
            self.last_seq = events[-1]["seq"]
            await self.send(text_data=render_to_string("web/runs/_new_events.html", {"events": events[::-1]}))
        return bool(events)

    async def catch_up(self) -> bool:
        """The run's events after the last one sent, from the table: a dropped nudge delays an event, never loses
        it. (A finished run may still gain events: a person resolving a call whose outcome was unknown.)"""
        async with self.updating:
            moved = await self._add(await database_sync_to_async(_events_after)(self.run_id, self.last_seq))
        if moved:
            self._render_soon()
        return moved

    def _render_soon(self) -> None:
        self.render_wanted = True  # also when a render is under way: it may have read the run before this event
        if self.render_task is None or self.render_task.done():
            self.render_task = asyncio.create_task(self._render_burst())

    async def _render_burst(self) -> None:
        loop = asyncio.get_running_loop()
        while self.render_wanted:
            await asyncio.sleep(max(PARTIALS_DELAY_S, self.rendered_at + PANELS_EVERY_S - loop.time()))
            async with render_slot():
                self.render_wanted = False  # what arrived while it waited for its turn is in this render too
                await self._send_panels()
                self.rendered_at = loop.time()

    async def _send_panels(self, first: bool = False, unless_at: int | None = None) -> None:
        """Every panel; its event list only up to the last event this socket added (after the first), so the
        stream of added events stays the complete one and a render never shows an event twice. `unless_at`: the
        page already shows the run up to that event (a page just loaded: re-sending would reset its forms)."""
        if self.membership is None:  # access ended meanwhile
            return
        # On the process's shared threads, not this socket's own: the socket's reads of a gap's events run there,
        # and a render there (~30 ms) held each event that arrived meanwhile (bench/run.py --only events: p95 40 ms
        # against a median of 3.5, when channels still hopped to that thread before every message).
        render = database_sync_to_async(run_panels, thread_sensitive=False)
        html, newest = await render(org_id=self.org_id, run_id=self.run_id, actor=self.actor,
                                    events_upto=None if first else self.last_seq)
        if first:
            self.last_seq = newest
            if unless_at is not None and unless_at == newest:
                return
        await self.send(text_data=html)


# --- the inbox and the run list ----------------------------------------------------------------------

def _inbox_list(actor, params: dict) -> tuple[str, dict]:
    """This page's pending items as the page renders them (the list and its empty state), and each one's
    `updated_at` (id -> when it last changed)."""
    items, shown, _ = pending_page(actor, params)
    html = (render_to_string("web/inbox/_items.html", {"items": items})
            + render_to_string("web/inbox/_empty.html", {"items": items}))
    return html, {r.id: r.updated_at for r in shown}


def _inbox_item(actor, filters: dict, approval_id) -> tuple[str, bool, Any] | None:
    """One item as this viewer sees it (a decided one shows who decided instead of its form), whether it still
    waits, and when it last changed; None when it is not the organisation's or the page's filters leave it out."""
    request = approvals.org_approvals(org_id=actor.org_id, **inbox_filters(filters)).filter(id=approval_id).first()
    if request is None:
        return None
    return (render_to_string("web/inbox/_item.html", {**item_context(request, actor), "selectable": True}),
            request.is_pending, request.updated_at)


class InboxConsumer(MemberConsumer):
    """The inbox page: on connect, its pending items; then every change to an item (new, a vote, decided by
    someone, expired) re-renders that item's card for this viewer, in place when the page shows it, at the
    top when it is new and waits. When the layer is quiet it reads which of its items changed and which are new
    (`catch_up`)."""

    async def joined(self) -> None:
        self.query = _query(self.scope)
        self.filters = {k: self.query[k] for k in ("crew", "agent", "server", "risk", "kind") if self.query.get(k)}
        # A new item goes where the page's order puts it: last when the oldest come first (the default).
        self.new_at = "afterbegin" if self.query.get("sort") == "newest" else "beforeend"
        html, shown = await database_sync_to_async(_inbox_list)(self.actor, self.query)
        self.shown, self.waiting = shown, set(shown)  # shown: id -> the `updated_at` the page shows
        await self.send(text_data=html)
        self.keep_up()

    async def forward(self, message: dict) -> None:
        if message["event"] == "inbox.changed":
            await self._show(uuid.UUID(str(message["data"]["approval_id"])))

    async def catch_up(self) -> bool:
        moved = await database_sync_to_async(moved_items)(self.actor, self.query, shown=dict(self.shown))
        for approval_id in moved:
            await self._show(approval_id)
        return bool(moved)

    async def _show(self, approval_id: uuid.UUID) -> None:
        """The item's card as it stands, in place or added (one at a time: an item is added to the page once)."""
        async with self.updating:
            item = await database_sync_to_async(_inbox_item)(self.actor, self.filters, approval_id)
            if item is None:  # not the page's (or gone): nothing to show, nothing to watch
                self.shown.pop(approval_id, None)
                return
            html, pending, changed_at = item
            if approval_id not in self.shown:
                if not pending:
                    return
                html = f'<div hx-swap-oob="{self.new_at}:#inbox-items">{html}</div>'
            self.shown[approval_id] = changed_at
            (self.waiting.add if pending else self.waiting.discard)(approval_id)
            await self.send(text_data=html + render_to_string("web/inbox/_empty.html", {"items": self.waiting}))


def _status_badges(statuses: list[tuple[str, str]]) -> str:
    return "".join(render_to_string("web/runs/_live_status.html", {"run_id": run_id, "status": status})
                   for run_id, status in statuses)


def _run_ids(value: str, limit: int = 100) -> list[str]:
    """The run ids a run list page shows (its socket's `runs` parameter); malformed ones are left out."""
    ids = []
    for part in value.split(",")[:limit]:
        try:
            ids.append(str(uuid.UUID(part)))
        except ValueError:
            continue
    return ids


class RunListConsumer(MemberConsumer):
    """The run list: on connect and on each status change, the status badge of each run the page shows; and, while
    one of them can still move and the layer is quiet, their statuses read again (`keep_up`)."""

    async def joined(self) -> None:
        self.run_ids = _run_ids(_query(self.scope).get("runs", ""))
        self.shown: dict[str, str] = {}  # run id -> the status its badge shows
        if self.run_ids:
            self.keep_up()
            await self._send_changed(self.run_ids)

    async def forward(self, message: dict) -> None:
        if message["event"] != "run.status" or message["data"]["run_id"] not in self.run_ids:
            return
        await self._send_changed([message["data"]["run_id"]])

    async def catch_up(self) -> bool | None:
        moving = [run_id for run_id in self.run_ids if self.shown.get(run_id) not in FINISHED]
        return await self._send_changed(moving) if moving else None

    async def _send_changed(self, run_ids: list[str]) -> bool:
        """The badges of those of `run_ids` whose status is not the one shown; whether there were any."""
        async with self.updating:
            read = await database_sync_to_async(runs.run_statuses)(org_id=self.org_id, run_ids=run_ids)
            changed = [(str(run_id), status) for run_id, status in read if self.shown.get(str(run_id)) != status]
            self.shown.update(changed)
            if changed:
                await self.send(text_data=_status_badges(changed))
        return bool(changed)


# --- the dashboard ---------------------------------------------------------------------------------

# Org events that change a dashboard tile (approvals, runs, spend, server health, the checklist).
DASHBOARD_EVENTS = frozenset({"inbox.count", "inbox.changed", "run.status", "server.synced", "server.deleted",
                              "tool.changed", "budget.threshold"})


def _dashboard_tiles(actor) -> str:
    return render_to_string("web/dashboard.html#tiles", {**dashboard_context(actor), "oob": True})


class DashboardConsumer(MemberConsumer):
    """The dashboard: on connect (so a reconnect catches up) and on every org event that moves a
    number, re-renders the tiles as the page does, for an out-of-band swap; when the layer is quiet, renders them
    again and sends them if they changed (`catch_up`)."""

    tiles = ""  # what the page shows

    async def joined(self) -> None:
        await self._send_tiles()
        self.keep_up()

    async def forward(self, message: dict) -> None:
        if message["event"] in DASHBOARD_EVENTS:
            await self._send_tiles()

    async def catch_up(self) -> bool:
        return await self._send_tiles()

    async def _send_tiles(self) -> bool:
        """The tiles, unless the page shows them as they are; whether they were sent."""
        async with self.updating:
            tiles = await database_sync_to_async(_dashboard_tiles)(self.actor)
            if tiles == self.tiles:
                return False
            self.tiles = tiles
            await self.send(text_data=tiles)
            return True
