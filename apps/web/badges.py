"""Counters shown in the navigation and pushed live over the org's websocket."""

from __future__ import annotations

from uuid import UUID


def pending_approvals(*, org_id: UUID) -> int:
    """Pending items in the approval inbox."""
    from apps.approvals.selectors import pending_count

    return pending_count(org_id=org_id)
