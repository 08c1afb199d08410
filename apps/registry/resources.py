"""The only writer of `Resource` rows: the resources a server lists, pinned and quarantined as tools are
(services.py's `_sync_tool` is the model), and what reading one for a run leaves behind (its content hash).

A resource's definition (definitions.canonical_resource) is pinned at first sight for an official or internal
server with no high scan finding; a third-party server's waits for an admin's pin. A changed definition is
quarantined until an admin pins it again (its page, the API, or the inbox's definition-change item): each saved
row is told to the caller's `review` (apps.registry.review), which keeps that item. The content is not pinned: it
may change between reads, and each read's hash goes into the run's trace.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.audit import services as audit
from apps.core.errors import Conflict, ValidationFailed
from apps.core.realtime import org_group, publish_after_commit
from apps.registry import selectors
from apps.registry.definitions import canonical_resource, definition_diff, definition_hash
from apps.registry.models import McpServer, Resource, Severity, ToolState, TrustTier
from apps.registry.review import DefinitionReview
from apps.registry.scanner import scan_resource

TRUSTED_TIERS = (TrustTier.OFFICIAL, TrustTier.INTERNAL)
URI_LIMIT = Resource._meta.get_field("uri").max_length
AWAITING_PIN = "New resource of a third-party server: waiting for an admin to review and pin it."
DRIFTED = "Its definition changed since it was pinned: review the diff and pin it again."
REMOVED = "The server no longer lists this resource."


def resource_fields(wire: dict[str, Any]) -> dict[str, Any]:
    """A listed resource (wire JSON) as the fields the registry stores."""
    size = wire.get("size")
    return {"uri": str(wire.get("uri") or ""), "name": str(wire.get("name") or "")[:300],
            "title": str(wire.get("title") or "")[:300], "description": str(wire.get("description") or ""),
            "mime_type": str(wire.get("mimeType") or "")[:200],
            "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
            "annotations": wire.get("annotations") or None}


def sync_resources(*, actor: Actor, server: McpServer, listed: list[dict[str, Any]], now, warnings: list[str],
                   review: DefinitionReview) -> list[str]:
    """Creates or refreshes the server's resource rows from a sync's `resources/list` (the caller's transaction,
    the server row locked), telling `review` of each. Returns the labels of the resources it quarantined now;
    audits each of them."""
    existing = {r.uri: r for r in Resource.objects.filter(server=server)}
    seen: set[str] = set()
    quarantined: list[str] = []
    for wire in listed:
        fields = resource_fields(wire)
        if not fields["uri"] or fields["uri"] in seen:
            continue
        if len(fields["uri"]) > URI_LIMIT:
            warnings.append(f"Refused: a resource URI longer than {URI_LIMIT} characters ({fields['uri'][:80]}…).")
            continue
        seen.add(fields["uri"])
        if _sync_resource(server, existing.get(fields["uri"]), fields, now, actor, review):
            quarantined.append(f"{server.name} {fields['uri']}")
    for uri, resource in existing.items():
        if uri not in seen and resource.state != ToolState.REMOVED:
            resource.state, resource.state_reason = ToolState.REMOVED, REMOVED
            resource.save(update_fields=["state", "state_reason", "updated_at"])
            review.resource_saved(resource)
    return quarantined


def _sync_resource(server: McpServer, resource: Resource | None, fields: dict[str, Any], now, actor: Actor,
                   review: DefinitionReview) -> bool:
    """One resource: its definition, findings and state. True when it became quarantined now."""
    definition = canonical_resource(uri=fields["uri"], name=fields["name"], title=fields["title"],
                                    description=fields["description"], mime_type=fields["mime_type"],
                                    annotations=fields["annotations"])
    digest = definition_hash(definition)
    findings = scan_resource(definition)
    high = next((f for f in findings if f["severity"] == Severity.HIGH), None)
    is_new = resource is None
    if resource is None:
        resource = Resource(org_id=server.org_id, server=server, uri=fields["uri"])
    previous_state = resource.state
    for key in ("name", "title", "description", "mime_type", "size", "annotations"):
        setattr(resource, key, fields[key])
    resource.definition, resource.definition_hash, resource.findings = definition, digest, findings
    resource.last_seen_at = now
    if is_new and server.trust_tier in TRUSTED_TIERS and high is None:
        resource.pinned_hash, resource.pinned_definition, resource.pinned_at = digest, definition, now
        resource.pinned_by = f"first sync ({server.get_trust_tier_display().lower()} server)"
    _decide_state(resource, high, previous_state, is_new=is_new)
    # Not the whole row: a run may note a read of it meanwhile (`note_read`), and that is not the sync's to undo.
    resource.save() if is_new else resource.save(update_fields=SYNCED_FIELDS)
    review.resource_saved(resource)
    if resource.state != ToolState.QUARANTINED or not (is_new or previous_state != ToolState.QUARANTINED):
        return False
    audit.record(org_id=server.org_id, actor=actor, action="resource.quarantined", target=resource,
                 target_label=resource.label,
                 data={"reason": resource.state_reason, "definition_hash": digest, "pinned_hash": resource.pinned_hash,
                       "findings": [f["code"] for f in findings]})
    return True


SYNCED_FIELDS = ["name", "title", "description", "mime_type", "size", "annotations", "definition", "definition_hash",
                 "findings", "last_seen_at", "pinned_hash", "pinned_definition", "pinned_at", "pinned_by", "state",
                 "state_reason", "updated_at"]


def _decide_state(resource: Resource, high: dict[str, str] | None, previous_state: str, *, is_new: bool) -> None:
    """As for tools: active only when the current definition is the pinned one; drift and a high finding in a
    new definition quarantine; an admin's `disabled` stays."""
    if previous_state == ToolState.DISABLED and not is_new:
        return
    if resource.is_pinned:
        resource.state, resource.state_reason = ToolState.ACTIVE, ""
    elif resource.pinned_hash:
        resource.state, resource.state_reason = ToolState.QUARANTINED, DRIFTED
    elif high is not None:
        resource.state = ToolState.QUARANTINED
        resource.state_reason = f"Poisoning scan ({high['code']} in {high['where']}): {high['message']}"[:300]
    else:
        resource.state, resource.state_reason = ToolState.QUARANTINED, AWAITING_PIN


def _locked(actor: Actor, resource_id: UUID | str) -> Resource:
    found = selectors.get_resource(org_id=actor.org_id, resource_id=resource_id)
    return Resource.objects.select_for_update().select_related("server").get(pk=found.pk)


def pin_resource(*, actor: Actor, resource_id: UUID | str, review: DefinitionReview) -> Resource:
    """Approves the resource's current definition: pins its hash and lifts a quarantine.

    Writes Resource (told to `review`) + `resource.pinned` audit. Raises PermissionDenied, NotFound, Conflict
    (removed by its server).
    """
    actor.require("servers.manage")
    with transaction.atomic():
        resource = _locked(actor, resource_id)
        if resource.state == ToolState.REMOVED:
            raise Conflict("The server no longer lists this resource; there is nothing to pin.")
        previous = resource.pinned_hash
        resource.pinned_hash, resource.pinned_definition = resource.definition_hash, resource.definition
        resource.pinned_at, resource.pinned_by = timezone.now(), actor.label
        if resource.state == ToolState.QUARANTINED:
            resource.state, resource.state_reason = ToolState.ACTIVE, ""
        resource.save(update_fields=["pinned_hash", "pinned_definition", "pinned_at", "pinned_by", "state",
                                     "state_reason", "updated_at"])
        review.resource_saved(resource)
        audit.record(org_id=actor.org_id, actor=actor, action="resource.pinned", target=resource,
                     target_label=resource.label,
                     data={"definition_hash": resource.definition_hash, "previous_pinned_hash": previous,
                           "findings": [f"{f['severity']}:{f['code']}" for f in resource.findings]})
    publish_after_commit(org_group(actor.org_id), "resource.changed", resource_id=str(resource.id))
    return resource


def set_resource_state(*, actor: Actor, resource_id: UUID | str, state: str, review: DefinitionReview) -> Resource:
    """An admin disables, quarantines or re-activates (a pinned) resource. Writes Resource (told to `review`) +
    `resource.state_changed` audit. Raises PermissionDenied, NotFound, ValidationFailed."""
    actor.require("servers.manage")
    allowed = (ToolState.ACTIVE, ToolState.DISABLED, ToolState.QUARANTINED)
    if state not in allowed:
        raise ValidationFailed("State must be active, disabled or quarantined.",
                               {"state": "Choose active, disabled or quarantined."})
    with transaction.atomic():
        resource = _locked(actor, resource_id)
        if state == resource.state:
            return resource
        if resource.state == ToolState.REMOVED:
            raise ValidationFailed("The server no longer lists this resource.", {"state": "The resource was removed."})
        if state == ToolState.ACTIVE and not resource.is_pinned:
            raise ValidationFailed("Pin the current definition to make this resource active.",
                                   {"state": "Pin the current definition first."})
        reasons = {ToolState.DISABLED: f"Disabled by {actor.label}.",
                   ToolState.QUARANTINED: f"Quarantined by {actor.label}.", ToolState.ACTIVE: ""}
        audit.record(org_id=actor.org_id, actor=actor, action="resource.state_changed", target=resource,
                     target_label=resource.label, data={"from": resource.state, "to": state})
        resource.state, resource.state_reason = state, reasons[state]
        resource.save(update_fields=["state", "state_reason", "updated_at"])
        review.resource_saved(resource)
    publish_after_commit(org_group(actor.org_id), "resource.changed", resource_id=str(resource.id))
    return resource


def set_resource_trusted_output(*, actor: Actor, resource_id: UUID | str, trusted: bool,
                                review: DefinitionReview) -> Resource:
    """An admin vouches (or stops vouching) for a resource's content: it does not taint a run by where it comes
    from (a scanner finding in it still does). Writes Resource (told to `review`) + `resource.trusted_output_changed`
    audit."""
    actor.require("servers.manage")
    with transaction.atomic():
        resource = _locked(actor, resource_id)
        if resource.trusted_output != trusted:
            audit.record(org_id=actor.org_id, actor=actor, action="resource.trusted_output_changed",
                         target=resource, target_label=resource.label,
                         data={"from": resource.trusted_output, "to": trusted})
            resource.trusted_output = trusted
            resource.save(update_fields=["trusted_output", "updated_at"])
            review.resource_saved(resource)
    return resource


def note_read(*, resource_id: UUID | str, content_hash: str) -> str:
    """A run read the resource's content (apps.runs.engine.context): keeps its hash as the latest. Returns the
    hash the last read before it saw ('' for a first read), so the run's trace can say the content changed.
    No audit row: a read is in the run's trace, and changes nothing an admin decided."""
    with transaction.atomic():
        rows = Resource.objects.filter(id=resource_id)
        previous = rows.select_for_update().values_list("last_content_hash", flat=True).first()
        if previous is None:
            return ""
        # An UPDATE, not save(): a read changes no pin, state or definition (nothing to review, and nothing a
        # gateway's view of the resource holds), and only these columns are the read's.
        now = timezone.now()
        rows.update(last_content_hash=content_hash, last_read_at=now, updated_at=now)
    return previous


def resource_diff(resource: Resource) -> str:
    """The drift diff shown on the resource page: pinned definition vs the current one."""
    if not resource.has_drift:
        return ""
    return definition_diff(resource.pinned_definition, resource.definition)
