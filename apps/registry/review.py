"""The seam between the registry's pins and the review of a changed definition.

A tool or a resource whose definition drifted from its pin is quarantined here, and a person reviews it in the
inbox (apps.approvals.definition_changes), an app after the registry. So every registry service that saves a
tool or resource row takes a `DefinitionReview` as an argument (no default: a caller that forgets it fails at
once instead of leaving an item missing) and tells it of each row it saved, in its own transaction. The
review reads the row's pin and state and opens or settles what it keeps; the registry asks nothing back.
"""

from __future__ import annotations

from typing import Protocol

from apps.registry.models import Resource, Tool


class DefinitionReview(Protocol):
    def tool_saved(self, tool: Tool) -> None:
        """`tool` was just saved (created, synced, pinned, its state or another field changed)."""

    def resource_saved(self, resource: Resource) -> None:
        """As `tool_saved`, for a resource."""
