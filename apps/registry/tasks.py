"""Celery tasks: ids in, one service call each."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from apps.accounts.actors import system_actor
from apps.core.errors import Conflict, NotFound
from apps.registry import selectors, services

PERIODIC_SYNC_AGE = timedelta(minutes=15)


@shared_task
def sync_server(server_id: str) -> None:
    """Sync one server (after a save, a button, a list-changed notice). Gone or disabled: nothing to do."""
    # The registry starts syncs itself (after an edit, on a server's list_changed notice, from beat); what a
    # sync quarantines is reviewed in the inbox, an app above this one, so the task hands the sync that review.
    from apps.approvals.definition_changes import inbox  # later app: a sync's quarantines are inbox items

    try:
        server = selectors.server_by_id(server_id)
        services.sync_server(actor=system_actor(server.org_id, "registry sync"), server_id=server.id, review=inbox)
    except (NotFound, Conflict):
        return


@shared_task
def sync_stale_servers() -> None:
    """Beat: enqueue a sync for every enabled server not synced for PERIODIC_SYNC_AGE."""
    for server_id in selectors.servers_due_for_sync(synced_before=timezone.now() - PERIODIC_SYNC_AGE).values_list(
            "id", flat=True):
        sync_server.delay(str(server_id))
