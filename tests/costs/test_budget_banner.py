"""The budget banner is live: a model call that crosses a threshold re-renders the banner on every open
page of the organisation (the org socket, a real uvicorn server), as the page renders it after a reload."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from decimal import Decimal

import pytest
import websockets
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.accounts.actors import member_actor
from apps.costs import services
from tests.processes import run_async

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(membership) -> str:
    client = Client()
    client.force_login(membership.user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


async def banner_after(url: str, cookie: str, org_id, trigger, timeout: float = 20.0) -> str:
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": url}
    async with websockets.connect(url.replace("http://", "ws://") + f"/ws/org/{org_id}/",
                                  additional_headers=headers) as socket:
        assert "inbox-badge" in await asyncio.wait_for(socket.recv(), timeout)  # subscribed
        await asyncio.to_thread(trigger)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frame = await asyncio.wait_for(socket.recv(), deadline - time.monotonic())
            if 'id="budget-banner"' in frame:
                return frame
    raise AssertionError("the budget banner never arrived")


def test_crossing_a_threshold_shows_the_banner_without_a_reload(owner, live_url):
    actor = member_actor(owner)
    services.set_model_price(actor=actor, model="my-llama", input_per_mtok=Decimal(1000), output_per_mtok=Decimal(0),
                             effective_from=timezone.now() - timedelta(days=1))
    services.set_budget(actor=actor, scope="org", amount_usd="1", thresholds=[80])
    page = Client()
    page.force_login(owner.user)
    assert 'data-testid="budget-banner"' not in page.get("/costs/").content.decode()

    def call_crossing_80_percent():
        try:  # $0.90 of $1.00
            services.record_usage(org_id=owner.org_id, provider="openai_compatible", model="my-llama",
                                  input_tokens=900, output_tokens=0)
        finally:
            connection.close()

    frame = run_async(banner_after(live_url, session_cookie(owner), owner.org_id, call_crossing_80_percent))

    assert 'hx-swap-oob="true"' in frame
    assert 'data-testid="budget-banner"' in frame and "alert-warning" in frame
    assert "Budget 80 % used." in frame and "$0.90 of $1.00" in frame
    reloaded = page.get("/costs/").content.decode()  # the same banner a reload shows
    assert "Budget 80 % used." in reloaded and "$0.90 of $1.00" in reloaded
