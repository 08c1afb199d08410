"""An agent's context resources (registry resources it was given on its page or through the API): read when one
of its tasks starts, once, not at every step.

Each is read through the registry's pool, its content capped (AIRLOCK_RESOURCE_MAX_BYTES: cut and marked past it),
scanned like a tool result, and put before the task as data between markers (apps.agents.prompts). It is content
Airlock does not control: reading it taints the run as a third-party tool result does, unless an admin trusts the
resource's or its server's output (a scanner finding taints even then). A resource that cannot be given now
(quarantined, disabled, removed, its server disabled or failing) is named to the model and in the trace, with why;
the task goes on without it. The trace gets each read's size, SHA-256 and findings (`context.read`), and whether the
content changed since the last read; the content itself is kept once, in the turn's messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from pydantic_ai.messages import UserPromptPart

from apps.agents.prompts import context_resources_text, wrap_resource
from apps.core import tracing
from apps.registry.models import Resource, ToolState
from apps.registry.pool import read_resource
from apps.registry.scanner import scan_text
from apps.runs.engine.results import injected_call_findings, scannable_text
from apps.runs.engine.seam import Store
from apps.runs.models import RunStep


@dataclass(frozen=True)
class Content:
    """A resource's content as the model gets it: text capped at `cap` bytes, with the whole content's size and
    SHA-256 (over its bytes: a text's UTF-8, a blob's decoded bytes, in order)."""

    text: str
    size: int
    sha256: str
    truncated: bool
    mime_type: str = ""


@dataclass(frozen=True)
class ContextRead:
    """One context resource at a task's start: read (`content`), or not available (`unavailable` says why)."""

    given: dict[str, Any]  # the agent snapshot's entry
    content: Content | None = None
    unavailable: str = ""
    findings: list[dict[str, str]] = field(default_factory=list)
    previous_sha256: str = ""
    taints: str = ""  # why reading it taints the run ('' when it does not)

    @property
    def label(self) -> str:
        return f"{self.given['server']} {self.given['uri']}"


def read_context(store: Store, agent: dict[str, Any]) -> list[ContextRead]:
    """Reads the agent's context resources now. An agent without any costs nothing (no query)."""
    given = agent.get("context_resources") or []
    if not given:
        return []
    live = store.live_resources([g["resource_id"] for g in given])
    return [_read_one(store, g, live.get(g["resource_id"])) for g in given]


def _read_one(store: Store, given: dict[str, Any], resource: Resource | None) -> ContextRead:
    problem = unavailable(resource)
    if problem:
        return ContextRead(given, unavailable=problem)
    try:
        with tracing.span("run.context_read", server=resource.server.name, uri=resource.uri):
            data = read_resource(resource.server_id, resource.uri, org_id=store.run.org_id, server=resource.server)
    except Exception as exc:  # ToolCallFailed/Timeout, NotFound (server deleted meanwhile) and the like
        return ContextRead(given, unavailable=f"reading it failed: {store.redact_outside(str(exc))[:300]}")
    content = resource_content(data, cap=settings.AIRLOCK_RESOURCE_MAX_BYTES)
    where = f"context resource {resource.server.name} {resource.uri}"
    scanned = scannable_text({"text": content.text})
    findings = [f.as_dict() for f in scan_text(scanned, where=where)] + injected_call_findings(scanned, where=where)
    previous = store.note_resource_read(str(resource.id), content.sha256)
    return ContextRead(given, content=content, findings=findings, previous_sha256=previous,
                       taints=_taint_reason(resource, flagged=any(f["severity"] != "low" for f in findings)))


def unavailable(resource: Resource | None) -> str:
    """Why this resource cannot be given to an agent now ('' when it can)."""
    if resource is None:
        return "it is no longer in the registry (its server was deleted)."
    if not resource.server.enabled:
        return f"its server {resource.server.name} is disabled."
    if resource.state == ToolState.REMOVED:
        return "its server no longer lists it."
    if resource.state == ToolState.DISABLED:
        return f"an admin disabled it. {resource.state_reason}".strip()
    if resource.state == ToolState.QUARANTINED or not resource.is_pinned:
        return f"it is quarantined: {resource.state_reason or 'its definition is not the pinned one.'}"
    return ""


def _taint_reason(resource: Resource, *, flagged: bool) -> str:
    name = f"the context resource {resource.uri} of {resource.server.name}"
    if flagged:
        return f"{name} looks like it carries instructions"
    if resource.trusted_output or resource.server.trusted_output:
        return ""
    return f"{name} is content Airlock does not control"


def resource_content(data: dict[str, Any], *, cap: int) -> Content:
    """The text of a `resources/read` result: its text contents in order, a binary one as a line saying what it
    is (a model is not handed raw bytes), cut at `cap` bytes of UTF-8 with a marker saying how much was left out."""
    digest, size, texts, mime = hashlib.sha256(), 0, [], ""
    for item in data.get("contents") or []:
        mime = mime or str(item.get("mimeType") or "")
        if isinstance(item.get("text"), str):
            raw = item["text"].encode()
            texts.append(item["text"])
        else:
            raw = _blob_bytes(item.get("blob"))
            texts.append(f"[binary content{' (' + str(item['mimeType']) + ')' if item.get('mimeType') else ''}, "
                         f"{len(raw)} bytes: not shown]")
        digest.update(raw)
        size += len(raw)
    encoded = "\n".join(texts).encode()
    if len(encoded) <= cap:
        return Content(encoded.decode(), size, digest.hexdigest(), False, mime)
    kept = encoded[:cap].decode(errors="ignore")
    marker = f"\n[... truncated: {len(encoded) - cap} more bytes not shown (AIRLOCK_RESOURCE_MAX_BYTES is {cap})]"
    return Content(kept + marker, size, digest.hexdigest(), True, mime)


def _blob_bytes(blob: Any) -> bytes:
    try:
        return base64.b64decode(str(blob or ""), validate=False)
    except (binascii.Error, ValueError):
        return str(blob or "").encode()


def parts(reads: list[ContextRead]) -> list[UserPromptPart]:
    """What the task's first request carries before the task: the resources read, and why any is missing."""
    if not reads:
        return []
    wrapped = [wrap_resource(label=r.label, about=_about(r.content), text=r.content.text)
               for r in reads if r.content is not None]
    missing = [f"the context resource {r.given['uri']} (server {r.given['server']}): {r.unavailable}"
               for r in reads if r.content is None]
    return [UserPromptPart(context_resources_text(wrapped=wrapped, unavailable=missing))]


def _about(content: Content) -> str:
    kind = f"{content.mime_type}, " if content.mime_type else ""
    cut = ", truncated" if content.truncated else ""
    return f"{kind}{content.size} bytes{cut}, sha256 {content.sha256[:12]}"


def record(store: Store, *, turn: RunStep, reads: list[ContextRead]) -> None:
    """The trace of what the task's start read (in the caller's transaction, with the turn): one event per
    resource, with its size and hash but not its content, and the run tainted by the first one that taints it."""
    for read in reads:
        base = {"step_id": str(turn.id), "agent": turn.agent_name, "resource_id": read.given["resource_id"],
                "server": read.given["server"], "uri": read.given["uri"]}
        if read.content is None:
            store.event("context.unavailable", **base, reason=read.unavailable)
            continue
        store.event("context.read", **base, bytes=read.content.size, sha256=read.content.sha256,
                    truncated=read.content.truncated, mime_type=read.content.mime_type,
                    changed=bool(read.previous_sha256) and read.previous_sha256 != read.content.sha256,
                    previous_sha256=read.previous_sha256, taints=read.taints,
                    findings=[{"code": f["code"], "severity": f["severity"], "message": f["message"]}
                              for f in read.findings])
    for read in reads:
        if read.taints:
            store.read_untrusted(read.content.text)
            store.taint(read.taints, tool=f"resource {read.label}")
