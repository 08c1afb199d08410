"""Writes for LLM connections, agents, their tool grants and context resources. Each is one transaction with its
audit row, and every change of an agent writes a new AgentVersion with what changed."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.actors import Actor
from apps.agents import selectors
from apps.agents.conditions import ConditionError, parse_condition
from apps.agents.models import Agent, AgentVersion, ContextResource, LlmConnection, Provider, ToolGrant
from apps.agents.policy import grant_problem
from apps.agents.providers import CheckResult, ConnectionSpec, check_connection, clean_base_url
from apps.agents.scripted import validate_script
from apps.audit import services as audit
from apps.audit.org_secrets import redact_outside
from apps.core.encryption import DecryptionFailed
from apps.core.errors import Conflict, NotFound, ValidationFailed

UNSET: Any = object()
AGENT_FIELDS = ("name", "role", "instructions", "in_scope", "out_of_scope", "connection_id", "model", "temperature",
                "max_steps", "script")
MAX_STEPS_LIMIT = 100


# --- LLM connections -----------------------------------------------------------------------

def _clean_connection(values: dict[str, Any]) -> dict[str, Any]:
    errors: dict[str, str] = {}
    name = (values.get("name") or "").strip()
    if not name:
        errors["name"] = "Give the connection a name."
    provider = values.get("provider") or ""
    if provider not in Provider.values:
        errors["provider"] = f"Provider must be one of: {', '.join(Provider.values)}."
    try:  # the scripted provider reaches no network: a base URL it was given is dropped, not checked
        base_url = clean_base_url(values.get("base_url") or "") if provider != Provider.SCRIPTED else ""
    except ValueError as exc:
        errors["base_url"], base_url = str(exc), ""
    if provider == Provider.OPENAI_COMPATIBLE and not base_url and "base_url" not in errors:
        errors["base_url"] = "An OpenAI-compatible server needs its base URL, e.g. http://localhost:11434/v1."
    if errors:
        raise ValidationFailed(next(iter(errors.values())), errors)
    return {"name": name[:100], "provider": provider, "base_url": base_url,
            "default_model": (values.get("default_model") or "").strip()[:200]}


def _name_taken(model, org_id: UUID, name: str, exclude_id: UUID | None = None) -> bool:
    rows = model.objects.filter(org_id=org_id, name__iexact=name)
    if exclude_id:
        rows = rows.exclude(id=exclude_id)
    return rows.exists()


def create_connection(*, actor: Actor, name: str, provider: str, base_url: str = "", api_key: str | None = None,
                      default_model: str = "") -> LlmConnection:
    """Creates an LLM connection (the key encrypted). Writes `llm_connection.created`.

    Raises PermissionDenied, ValidationFailed, Conflict (name taken).
    """
    actor.require("build")
    clean = _clean_connection({"name": name, "provider": provider, "base_url": base_url,
                               "default_model": default_model})
    with transaction.atomic():
        if _name_taken(LlmConnection, actor.org_id, clean["name"]):
            raise Conflict(f"A connection named {clean['name']!r} exists.")
        connection = LlmConnection.objects.create(org_id=actor.org_id, api_key=(api_key or "").strip() or None,
                                                  **clean)
        audit.record(org_id=actor.org_id, actor=actor, action="llm_connection.created", target=connection,
                     target_label=connection.name,
                     data={"provider": connection.provider, "base_url": connection.base_url,
                           "has_key": connection.has_api_key})
    return connection


def update_connection(*, actor: Actor, connection_id: UUID | str, name: str = UNSET, provider: str = UNSET,
                      base_url: str = UNSET, api_key: str | None = UNSET,
                      default_model: str = UNSET) -> LlmConnection:
    """Changes a connection. `api_key`: omitted or None keeps the stored key, "" clears it.

    Writes `llm_connection.updated`. Raises PermissionDenied, NotFound, ValidationFailed, Conflict.
    """
    actor.require("build")
    with transaction.atomic():
        connection = selectors.get_connection(org_id=actor.org_id, connection_id=connection_id)
        given = {"name": name, "provider": provider, "base_url": base_url, "default_model": default_model}
        current = {k: getattr(connection, k) for k in given}
        clean = _clean_connection({k: current[k] if v is UNSET else v for k, v in given.items()})
        if _name_taken(LlmConnection, actor.org_id, clean["name"], exclude_id=connection.id):
            raise Conflict(f"A connection named {clean['name']!r} exists.")
        changed = [k for k, v in clean.items() if current[k] != v]
        for key in changed:
            setattr(connection, key, clean[key])
        if api_key is not UNSET and api_key is not None:
            connection.api_key = api_key.strip() or None
            changed.append("api_key")
        if changed:
            connection.save(update_fields=[*changed, "updated_at"])
            audit.record(org_id=actor.org_id, actor=actor, action="llm_connection.updated", target=connection,
                         target_label=connection.name, data={"changed": changed})
    return connection


def delete_connection(*, actor: Actor, connection_id: UUID | str) -> None:
    """Deletes an unused connection. Raises PermissionDenied, NotFound, Conflict (agents use it)."""
    actor.require("build")
    with transaction.atomic():
        connection = selectors.get_connection(org_id=actor.org_id, connection_id=connection_id)
        users = list(connection.agents.values_list("name", flat=True))
        if users:
            raise Conflict(f"{connection.name} is used by {', '.join(sorted(users))}: move those agents to "
                           "another connection first.")
        audit.record(org_id=actor.org_id, actor=actor, action="llm_connection.deleted", target=connection,
                     target_label=connection.name)
        connection.delete()


def connection_spec(connection: LlmConnection) -> ConnectionSpec:
    """The plain settings a model is built from, with the key decrypted (never logged, never stored elsewhere)."""
    return ConnectionSpec(provider=connection.provider, base_url=connection.base_url, api_key=connection.api_key)


def test_connection(*, actor: Actor, connection_id: UUID | str, model: str = "") -> CheckResult:
    """Makes one tiny real call through the connection and stores the outcome on it.

    The network call happens outside any transaction. Writes `llm_connection.tested`.
    Raises PermissionDenied, NotFound.
    """
    actor.require("build")
    connection = selectors.get_connection(org_id=actor.org_id, connection_id=connection_id)
    model_name = (model or connection.default_model or "").strip()
    try:
        spec = connection_spec(connection)
    except DecryptionFailed as exc:
        result = CheckResult(False, str(exc))
    else:
        if not model_name and connection.provider != Provider.SCRIPTED:
            result = CheckResult(False, "Give a model name to test with (or set the connection's default model).")
        else:
            result = check_connection(spec, model_name=model_name)
    # the provider's words may quote any of the org's secrets, not only this connection's key
    result = replace(result, message=redact_outside(result.message, org_id=actor.org_id)[:500])
    with transaction.atomic():
        connection.last_checked_at = timezone.now()
        connection.last_check_ok = result.ok
        connection.last_check_message = result.message[:500]
        connection.save(update_fields=["last_checked_at", "last_check_ok", "last_check_message", "updated_at"])
        audit.record(org_id=actor.org_id, actor=actor, action="llm_connection.tested", target=connection,
                     target_label=connection.name, data={"ok": result.ok, "model": model_name})
    return result


# --- Agents ----------------------------------------------------------------------------------

def _text(values: dict[str, Any], key: str, limit: int | None = None) -> str:
    text = str(values.get(key) or "").strip()
    return text[:limit] if limit else text


def _clean_numbers(values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"temperature": None, "max_steps": 8}
    temperature = values.get("temperature")
    if temperature not in (None, ""):
        try:
            out["temperature"] = float(temperature)
            if not math.isfinite(out["temperature"]) or not 0 <= out["temperature"] <= 2:
                raise ValueError
        except (TypeError, ValueError):
            errors["temperature"] = "Temperature is a number from 0 to 2 (leave it empty for the model's default)."
    steps = values.get("max_steps")
    try:
        out["max_steps"] = int(steps if steps not in (None, "") else 8)
        if not 1 <= out["max_steps"] <= MAX_STEPS_LIMIT:
            raise ValueError
    except (TypeError, ValueError):
        errors["max_steps"] = f"Max steps per turn is a whole number from 1 to {MAX_STEPS_LIMIT}."
    return out


def _clean_agent(values: dict[str, Any], *, org_id: UUID, agent: Agent | None) -> dict[str, Any]:
    """Checks every field and the grants at once, so a form can show all its errors together."""
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {"name": _text(values, "name", 100), "role": _text(values, "role", 300)}
    for key in ("instructions", "in_scope", "out_of_scope"):
        clean[key] = _text(values, key)
    if not clean["name"]:
        errors["name"] = "Give the agent a name."
    elif _name_taken(Agent, org_id, clean["name"], exclude_id=agent.id if agent else None):
        errors["name"] = f"An agent named {clean['name']!r} exists."
    clean["connection"] = None
    if not values.get("connection_id"):
        errors["connection_id"] = "Choose an LLM connection (the scripted one needs no key)."
    else:
        try:
            clean["connection"] = selectors.get_connection(org_id=org_id, connection_id=values["connection_id"])
        except NotFound:  # another organisation's and a missing one look the same
            errors["connection_id"] = "Choose one of your LLM connections."
    clean["model"] = _text(values, "model", 200)
    connection = clean["connection"]
    if connection and connection.provider != Provider.SCRIPTED and not (clean["model"] or connection.default_model):
        errors["model"] = "Name the model this agent uses, e.g. gpt-4o-mini."
    if connection and not clean["model"]:
        clean["model"] = connection.default_model
    clean.update(_clean_numbers(values, errors))
    clean["script"] = None
    try:
        script = validate_script(values.get("script"))
        clean["script"] = script if (connection is None or connection.provider == Provider.SCRIPTED) else None
    except ValidationFailed as exc:
        errors.update(exc.errors)
    clean["grants"] = _clean_grants(values.get("grants"), org_id=org_id, agent=agent, errors=errors)
    clean["context_resources"] = _clean_context(values.get("context_resources"), org_id=org_id, agent=agent,
                                                errors=errors)
    if errors:
        raise ValidationFailed("Please fix the highlighted fields: " + "; ".join(errors.values()), errors)
    return clean


def _clean_grants(grants: Any, *, org_id: UUID, agent: Agent | None, errors: dict[str, str]) -> list[dict] | None:
    """[{"tool": Tool, "policy", "condition"}], or None when grants were not given (keep them)."""
    if grants is None:
        return None
    existing = {(g.tool_id, g.policy, g.condition) for g in agent.grants.all()} if agent else set()
    out, seen = [], set()
    for index, raw in enumerate(grants):
        key = f"grants.{index}"
        raw = raw if isinstance(raw, dict) else {}
        ref = str(raw.get("tool") or "").strip()
        tool = selectors.find_tool(org_id=org_id, ref=ref) if ref else None
        if tool is None:
            errors[key] = f"No tool {ref!r} in your registry." if ref else "Choose a tool."
            continue
        if tool.id in seen:
            errors[key] = f"{tool.qualified_name} is granted twice."
            continue
        seen.add(tool.id)
        policy, condition = str(raw.get("policy") or ""), str(raw.get("condition") or "").strip()
        unchanged = (tool.id, policy, condition) in existing  # a grant kept as it was is not re-judged
        problem = None if unchanged else grant_problem(tool=tool.qualified_name, risk=tool.risk, state=tool.state,
                                                       trust_tier=tool.server.trust_tier, policy=policy)
        problem = problem or _condition_problem(condition, tool)
        if problem:
            errors[key] = problem
            continue
        out.append({"tool": tool, "policy": policy, "condition": condition})
    return out


def _clean_context(refs: Any, *, org_id: UUID, agent: Agent | None, errors: dict[str, str]) -> list | None:
    """The resources given as context (a list of resource ids or URIs), or None when not given (keep them). A new
    one must be usable now (active, pinned, its server enabled); one the agent has already is kept whatever its
    state, so saving an agent does not fail for a resource quarantined since (a run then says it is unavailable)."""
    if refs is None:
        return None
    kept = {c.resource_id for c in agent.context_resources.all()} if agent else set()
    out, seen = [], set()
    for index, ref in enumerate(refs):
        key, ref = f"context_resources.{index}", str(ref or "").strip()
        found = selectors.find_resource(org_id=org_id, ref=ref) if ref else None
        if isinstance(found, list):
            errors[key] = (f"{ref} is listed by several servers ({', '.join(r.server.name for r in found)}): "
                           "give the resource's id.")
            continue
        if found is None:
            errors[key] = f"No resource {ref!r} in your registry." if ref else "Choose a resource."
            continue
        if found.id in seen:
            continue
        if found.id not in kept and not found.is_usable:
            errors[key] = (f"{found.label} is {found.state if found.server.enabled else 'on a disabled server'}: "
                           "only active, pinned resources can be given to an agent.")
            continue
        seen.add(found.id)
        out.append(found)
    return out


def _condition_problem(condition: str, tool) -> str | None:
    if not condition:
        return None
    try:
        parsed = parse_condition(condition)
    except ConditionError as exc:
        return f"{tool.qualified_name}: {exc}"
    known = set((tool.input_schema or {}).get("properties", {}) or {})
    unknown = sorted(parsed.argument_names - known) if known else []
    if unknown:
        return (f"{tool.qualified_name} has no argument {unknown[0]!r}; it takes: "
                f"{', '.join(sorted(known))}.")
    return None


def _write_version(*, agent: Agent, actor: Actor, before: dict | None) -> AgentVersion | None:
    """Stores the agent's new snapshot as the next version, when anything changed."""
    agent = selectors.get_agent(org_id=agent.org_id, agent_id=agent.id)  # fresh grants
    snapshot = selectors.agent_snapshot(agent)
    changes = selectors.diff_snapshots(before, snapshot)
    if before is not None and not changes:
        return None
    number = (AgentVersion.objects.filter(agent=agent).order_by("-number").values_list("number", flat=True)
              .first() or 0) + 1
    if number != agent.version:
        agent.version = number
        agent.save(update_fields=["version", "updated_at"])
    return AgentVersion.objects.create(org_id=agent.org_id, agent=agent, number=number, snapshot=snapshot,
                                       changes=changes, actor_label=actor.label)


def _apply_grants(agent: Agent, grants: list[dict]) -> None:
    wanted = {g["tool"].id: g for g in grants}
    agent.grants.exclude(tool_id__in=wanted).delete()
    current = {g.tool_id: g for g in agent.grants.all()}
    for tool_id, g in wanted.items():
        grant = current.get(tool_id)
        if grant is None:
            ToolGrant.objects.create(org_id=agent.org_id, agent=agent, tool=g["tool"], policy=g["policy"],
                                     condition=g["condition"])
        elif (grant.policy, grant.condition) != (g["policy"], g["condition"]):
            grant.policy, grant.condition = g["policy"], g["condition"]
            grant.save(update_fields=["policy", "condition", "updated_at"])


def _apply_context(agent: Agent, resources: list) -> None:
    wanted = {r.id: r for r in resources}
    agent.context_resources.exclude(resource_id__in=wanted).delete()
    current = set(agent.context_resources.values_list("resource_id", flat=True))
    ContextResource.objects.bulk_create([ContextResource(org_id=agent.org_id, agent=agent, resource=r)
                                         for rid, r in wanted.items() if rid not in current])


def create_agent(*, actor: Actor, **values: Any) -> Agent:
    """Creates an agent with its grants, context resources and version 1. Values as in AGENT_FIELDS plus `grants`
    and `context_resources` (resource ids or URIs).

    Writes Agent, ToolGrants, ContextResources, AgentVersion, `agent.created`. Raises PermissionDenied,
    ValidationFailed.
    """
    actor.require("build")
    with transaction.atomic():
        clean = _clean_agent(values, org_id=actor.org_id, agent=None)
        grants = clean.pop("grants") or []
        context = clean.pop("context_resources") or []
        agent = Agent.objects.create(org_id=actor.org_id, **clean)
        _apply_grants(agent, grants)
        _apply_context(agent, context)
        version = _write_version(agent=agent, actor=actor, before=None)
        audit.record(org_id=actor.org_id, actor=actor, action="agent.created", target=agent, target_label=agent.name,
                     data={"version": version.number if version else 1, "grants": len(grants)})
    return selectors.get_agent(org_id=actor.org_id, agent_id=agent.id)


def update_agent(*, actor: Actor, agent_id: UUID | str, **changes: Any) -> Agent:
    """Changes the given fields (others stay); `grants` and `context_resources`, when given, replace the allowlist
    and the context resources.

    Writes a new AgentVersion with the diff when anything changed, and `agent.updated`.
    Raises PermissionDenied, NotFound, ValidationFailed.
    """
    actor.require("build")
    with transaction.atomic():
        list(Agent.objects.select_for_update().filter(org_id=actor.org_id, id=agent_id))  # one writer at a time
        agent = selectors.get_agent(org_id=actor.org_id, agent_id=agent_id)
        before = selectors.agent_snapshot(agent)
        values = {key: getattr(agent, key) for key in AGENT_FIELDS}
        values.update({k: v for k, v in changes.items() if k in AGENT_FIELDS})
        values["grants"] = changes.get("grants")
        values["context_resources"] = changes.get("context_resources")
        clean = _clean_agent(values, org_id=actor.org_id, agent=agent)
        grants, context = clean.pop("grants"), clean.pop("context_resources")
        for key, value in clean.items():
            setattr(agent, key, value)
        agent.save(update_fields=[*clean.keys(), "updated_at"])
        if grants is not None:
            _apply_grants(agent, grants)
        if context is not None:
            _apply_context(agent, context)
        version = _write_version(agent=agent, actor=actor, before=before)
        if version is not None:
            audit.record(org_id=actor.org_id, actor=actor, action="agent.updated", target=agent,
                         target_label=agent.name, data={"version": version.number, "changed": sorted(version.changes)})
    return selectors.get_agent(org_id=actor.org_id, agent_id=agent.id)


def set_agent_enabled(*, actor: Actor, agent_id: UUID | str, enabled: bool) -> Agent:
    """Disables (or re-enables) an agent; history, grants and crews stay. Writes a version and an audit row."""
    actor.require("build")
    with transaction.atomic():
        agent = selectors.get_agent(org_id=actor.org_id, agent_id=agent_id)
        if agent.enabled == enabled:
            return agent
        before = selectors.agent_snapshot(agent)
        agent.enabled = enabled
        agent.save(update_fields=["enabled", "updated_at"])
        _write_version(agent=agent, actor=actor, before=before)
        audit.record(org_id=actor.org_id, actor=actor, action="agent.enabled" if enabled else "agent.disabled",
                     target=agent, target_label=agent.name)
    return selectors.get_agent(org_id=actor.org_id, agent_id=agent.id)


def delete_agent(*, actor: Actor, agent_id: UUID | str) -> None:
    """Deletes an agent no crew uses; its last snapshot goes into the audit row.

    Raises PermissionDenied, NotFound, Conflict (naming the crews that use it).
    """
    actor.require("build")
    with transaction.atomic():
        agent = selectors.get_agent(org_id=actor.org_id, agent_id=agent_id)
        crews = selectors.crews_using(agent)
        if crews:
            raise Conflict(f"{agent.name} is used by the crew{'s' if len(crews) > 1 else ''} {', '.join(crews)}: "
                           "remove it from them first, or disable it instead (disabling keeps everything).")
        audit.record(org_id=actor.org_id, actor=actor, action="agent.deleted", target=agent, target_label=agent.name,
                     data={"snapshot": selectors.agent_snapshot(agent)})
        agent.delete()
