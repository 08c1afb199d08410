"""Realtime: group names (one place) and publishing after commit.

An event is small: a name and ids/counters. Consumers turn it into the same partial the page
renders; nothing else travels over the socket. Publishing waits for the transaction to commit,
so a browser never hears about a row it cannot yet read.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

CONSUMER_HANDLER = "realtime.event"


def org_group(org_id: UUID | str) -> str:
    """Everything an organisation's open pages may update (inbox badge, dashboard tiles)."""
    return f"org.{org_id}"


def run_group(run_id: UUID | str) -> str:
    """One run's trace page."""
    return f"run.{run_id}"


def publish(group: str, event: str, **data: Any) -> None:
    """Send now. Prefer `publish_after_commit` inside services."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": CONSUMER_HANDLER, "event": event, "data": data})
    except Exception:
        # A lost live update must never fail the write that caused it: pages re-read on load.
        logger.exception("realtime publish to %s failed", group)


def publish_after_commit(group: str, event: str, **data: Any) -> None:
    transaction.on_commit(lambda: publish(group, event, **data))
