"""Registry and agent changes, told to every gateway process.

A gateway process keeps each agent's view (its offered tools, grants, servers) and each key's
identity in memory. Whatever changes them - a grant edited, an agent disabled, a tool or a
resource quarantined or pinned, a server disabled or re-synced, a key revoked - is saved through the
ORM by some process (web, worker, a shell). Receivers connected here (`apps.gateway.apps`)
turn those saves into one realtime message per organisation and transaction, sent after
commit to the `gateway.registry` group of the channel layer (Redis, or the embedded
database-backed layer). Each gateway process listens on that group
(`server.Gateway.listen_for_changes`), re-reads the views of the organisation's agents it
holds, and sends `notifications/tools/list_changed` (and resources/prompts) to the sessions of
agents whose view changed; a key named in the message is re-checked on its next request.

A message is a nudge, never the data: a lost one is caught up by the gateway's slow re-read
(`AIRLOCK_GATEWAY_VIEW_REFRESH_S`).

Why save signals here, when domain flow never goes through them (STYLE.md): this is cache invalidation in
other processes, not a decision. The rows are written by agents, registry and gateway services, two of those
apps below this one, and every write of them, whoever makes it, leaves a gateway's cached view stale; a
receiver on the model is the one place that sees each save and delete. The receivers write nothing and decide
nothing. Definition-change inbox items, which are domain flow, are explicit calls instead
(apps.registry.review).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from apps.core.realtime import publish

logger = logging.getLogger(__name__)

GROUP = "gateway.registry"
EVENT = "registry.changed"


class _Notice:
    """The on-commit callback for one organisation in one transaction (changes join it)."""

    def __init__(self, org_id: str) -> None:
        self.org_id = org_id
        self.agents: set[str] = set()
        self.keys: set[str] = set()
        self.whole_org = False

    def add(self, *, agent_id: str | None, key_id: str | None) -> None:
        if agent_id:
            self.agents.add(agent_id)
        elif key_id:
            self.keys.add(key_id)
        else:
            self.whole_org = True

    def data(self) -> dict[str, Any]:
        return {"org_id": self.org_id, "agents": None if self.whole_org else sorted(self.agents),
                "keys": sorted(self.keys)}

    def __call__(self) -> None:
        try:
            publish(GROUP, EVENT, **self.data())
        except Exception:  # a lost nudge is caught up by the gateway's slow re-read
            logger.exception("could not tell gateway processes about a change in org %s", self.org_id)


def changed(*, org_id: Any, agent_id: Any = None, key_id: Any = None) -> None:
    """Tells gateway processes, after commit, that the org's registry (or one agent, or one key) changed."""
    org = str(org_id)
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        for entry in getattr(connection, "run_on_commit", []):  # (savepoint ids, func, robust)
            func = entry[1]
            if isinstance(func, _Notice) and func.org_id == org:
                func.add(agent_id=str(agent_id) if agent_id else None, key_id=str(key_id) if key_id else None)
                return
    notice = _Notice(org)
    notice.add(agent_id=str(agent_id) if agent_id else None, key_id=str(key_id) if key_id else None)
    transaction.on_commit(notice)


# --- receivers (connected in apps.gateway.apps) ----------------------------------------------------

def agent_changed(sender, instance, **kwargs) -> None:
    changed(org_id=instance.org_id, agent_id=instance.pk)


def grant_changed(sender, instance, **kwargs) -> None:
    changed(org_id=instance.org_id, agent_id=instance.agent_id)


def registry_changed(sender, instance, **kwargs) -> None:
    """A tool, a resource or a server: any agent of the organisation may offer it."""
    changed(org_id=instance.org_id)


def key_changed(sender, instance, created=False, **kwargs) -> None:
    if not created:
        changed(org_id=instance.org_id, key_id=instance.pk)
