"""Counters shown in the navigation and pushed live over the org's websocket."""

from __future__ import annotations

from uuid import UUID


def pending_approvals(*, org_id: UUID) -> int:
    """What waits for a person in the inbox: pending approvals and tool calls whose outcome is unknown."""
    from apps.approvals.selectors import inbox_count

    return inbox_count(org_id=org_id)
