"""Counters shown in the navigation and pushed live over the org's websocket."""

from __future__ import annotations

from uuid import UUID


def pending_approvals(*, org_id: UUID) -> int:
    """Pending items in the approval inbox. Zero until the approvals app exists (see the inbox issue)."""
    return 0
