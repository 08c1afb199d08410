"""What a tool definition is, for pinning and policy: its canonical form and hash, its risk
class, its qualified name, and the diff between two definitions. Pure functions, no I/O."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any

from apps.registry.models import Risk, RiskSource, TrustTier

SERVER_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MODEL_TOOL_NAME_MAX = 64  # OpenAI's limit; Anthropic allows 128
SERVER_NAME_RULE = "Use 1-32 lowercase letters, digits or hyphens, starting with a letter."
# The run's own tools (`run.get_result`), answered by the run engine from the run's ledger and never registered
# (apps/runs/engine/handoff.py): no server may take their name.
RUN_TOOLS_SERVER = "run"


def canonical_definition(*, name: str, title: str | None, description: str | None, input_schema: Any,
                         output_schema: Any, annotations: Any) -> dict[str, Any]:
    """The whole definition a model sees or an agent relies on; the pin covers all of it."""
    return {
        "name": name,
        "title": title or "",
        "description": description or "",
        "input_schema": input_schema or {},
        "output_schema": output_schema,
        "annotations": annotations or None,
    }


# What a resource's annotations say about its content rather than about what it is: not pinned, or a file whose
# modification time the server reports would be quarantined every time it is edited.
RESOURCE_CONTENT_ANNOTATIONS = ("lastModified",)


def canonical_resource(*, uri: str, name: str | None, title: str | None, description: str | None,
                       mime_type: str | None, annotations: Any) -> dict[str, Any]:
    """What a resource is, as pinned: what a model or a person reads about it before its content. Its `size` and
    its annotations' `lastModified` describe the content, which may change between reads: they are not pinned."""
    kept = {k: v for k, v in (annotations or {}).items() if k not in RESOURCE_CONTENT_ANNOTATIONS}
    return {
        "uri": uri,
        "name": name or "",
        "title": title or "",
        "description": description or "",
        "mime_type": mime_type or "",
        "annotations": kept or None,
    }


def definition_hash(definition: dict[str, Any]) -> str:
    body = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


# A tool named like this acts: a read-only claim for it is not believed (a delete_/send_/transfer_ tool).
ACTING_NAME = re.compile(
    r"^(delete|remove|destroy|drop|purge|wipe|erase|send|email|mail|post|publish|transfer|wire|pay|refund|"
    r"charge|withdraw|create|update|write|edit|modify|set|put|insert|upload|move|rename|grant|revoke|invite|kill|"
    r"terminate|exec|execute|run|deploy|approve|cancel|book|order|buy|sell)(?=[_.-]|[A-Z]|$)")  # its leading verb
RISK_ORDER = {Risk.READ: 0, Risk.WRITE: 1, Risk.DANGEROUS: 2}


def claims_read_only_but_acts(*, name: str, annotations: dict[str, Any] | None) -> bool:
    """A tool that says it only reads (readOnlyHint) while its name says it acts."""
    name = name or ""
    return bool((annotations or {}).get("readOnlyHint") is True and ACTING_NAME.match(name[:1].lower() + name[1:]))


def classify_risk(*, tier: str, annotations: dict[str, Any] | None, name: str = "") -> tuple[str, str]:
    """(risk, risk_source). Annotations are claims: believed only from official/internal servers.

    destructiveHint=true -> dangerous (even if it also claims read-only); readOnlyHint=true -> read,
    unless the tool's name says it acts (delete_, send_, transfer_...: then write, the higher risk);
    anything else -> write. No annotations, or a third_party server -> write by default.
    """
    if tier == TrustTier.THIRD_PARTY or not annotations:
        return Risk.WRITE, RiskSource.DEFAULT
    if annotations.get("destructiveHint") is True:
        return Risk.DANGEROUS, RiskSource.ANNOTATIONS
    if annotations.get("readOnlyHint") is True and not claims_read_only_but_acts(name=name, annotations=annotations):
        return Risk.READ, RiskSource.ANNOTATIONS
    return Risk.WRITE, RiskSource.ANNOTATIONS


def reaches_open_world(*, tier: str, annotations: dict[str, Any] | None) -> bool:
    """Whether a tool talks to the open world (the web, a public search), so that its results are content
    nobody vouches for and its arguments can carry data out.

    MCP's own default for a tool without `openWorldHint` is true. A third-party server's claims are not
    believed (always open world); an official server's are, with MCP's default; an internal server's tools
    are closed unless they say otherwise (your own team's code, reaching your own systems).
    """
    annotations = annotations or {}
    claimed = annotations.get("openWorldHint", annotations.get("open_world_hint"))
    if tier == TrustTier.THIRD_PARTY:
        return True
    if tier == TrustTier.INTERNAL:
        return claimed is True
    return claimed is not False


OUTSIDE, TRUSTED = "outside", "trusted"  # what an admin may say of a tool's or server's output ("" : nothing)


def output_trust(tool: Any, server: Any) -> str:
    """What admins said of a tool's results: "outside" (text written outside the organisation), "trusted"
    (vouched for), or "" (nothing: the tier and hints decide). The tool's own word wins over its server's."""
    for level in (tool, server):
        if getattr(level, "outside_content", False):
            return OUTSIDE
        if getattr(level, "trusted_output", False):
            return TRUSTED
    return ""


def untrusted_output(*, tier: str, open_world: bool, trust: str) -> bool:
    """Whether reading a result taints a run by where it came from: a third-party or open-world tool, or one an
    admin marked outside content, unless an admin vouched for it. (A scanner finding taints regardless.)"""
    if trust == OUTSIDE:
        return True
    return trust != TRUSTED and (tier == TrustTier.THIRD_PARTY or open_world)


def server_name_error(name: str) -> str | None:
    if not SERVER_NAME_RE.match(name or ""):
        return SERVER_NAME_RULE
    if name == RUN_TOOLS_SERVER:
        return f"{RUN_TOOLS_SERVER!r} is kept for Airlock's own tools (run.get_result); choose another name."
    return None


def qualified_name(server_name: str, tool_name: str) -> str:
    return f"{server_name}.{tool_name}"


def model_tool_name(qualified: str) -> str:
    """The name a model sees: providers refuse dots, so `orders.get_status` -> `orders__get_status`."""
    return qualified.replace(".", "__", 1)


def tool_name_error(server_name: str, tool_name: str) -> str | None:
    """Why this tool cannot be offered to a model under `server.tool`, or None."""
    if not TOOL_NAME_RE.match(tool_name or ""):
        return (f"Tool name {tool_name!r} cannot be a model tool name: only letters, digits, '_' and '-' "
                "(1-64 characters) are allowed.")
    if len(model_tool_name(qualified_name(server_name, tool_name))) > MODEL_TOOL_NAME_MAX:
        return (f"Tool name {server_name}.{tool_name} is too long for a model tool name "
                f"(at most {MODEL_TOOL_NAME_MAX} characters with the server prefix).")
    return None


def definition_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """A unified diff of two definitions as pretty JSON (empty when equal)."""
    def lines(d: dict[str, Any] | None) -> list[str]:
        return json.dumps(d or {}, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)

    return "".join(difflib.unified_diff(lines(old), lines(new), fromfile="pinned", tofile="current"))
