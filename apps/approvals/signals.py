"""Tool and resource definition changes reach the inbox: the registry sits below approvals and knows nothing of
it, so approvals listens to the registry's Tool and Resource saves (inside the sync's transaction)."""

from __future__ import annotations

from typing import Any

from apps.approvals import services


def tool_saved(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    drifted = bool(instance.pinned_hash) and instance.definition_hash != instance.pinned_hash
    if instance.state == "quarantined" and drifted:
        services.open_definition_change(tool=instance)
    elif instance.pinned_hash and not drifted:
        services.close_definition_changes(tool=instance)


def resource_saved(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    drifted = bool(instance.pinned_hash) and instance.definition_hash != instance.pinned_hash
    if instance.state == "quarantined" and drifted:
        services.open_resource_change(resource=instance)
    elif instance.pinned_hash and not drifted:
        services.close_resource_changes(resource=instance)
