"""Counters shown in the navigation and pushed live over the org's websocket."""

from __future__ import annotations

from uuid import UUID

from apps.approvals import selectors as approvals
from apps.runs import selectors as runs


def pending_approvals(*, org_id: UUID) -> int:
    """What waits for a person in the inbox: pending approvals and tool calls whose outcome is unknown."""
    return approvals.pending_count(org_id=org_id) + runs.unknown_call_count(org_id)
