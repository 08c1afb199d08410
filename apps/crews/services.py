"""Writes for crews. Each save is one transaction: the crew, its tasks and members rewritten,
a CrewVersion with what changed, and the audit row."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.db import transaction

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.agents.models import Agent
from apps.agents.policy import ON_UNTRUSTED
from apps.audit import services as audit
from apps.core.errors import NotFound, ValidationFailed
from apps.crews import selectors, validation
from apps.crews.models import Crew, CrewMember, CrewTask, CrewVersion, Process

CREW_FIELDS = ("name", "description", "process", "supervisor_agent_id", "tasks", "members", "routing_rules",
               "inputs", "max_hops", "max_tool_calls", "timeout_s", "token_budget", "budget_usd", "approvals_required",
               "approval_ttl_hours", "separation_of_duties", "on_untrusted")
LIMITS = {"max_hops": (1, 100, 6), "max_tool_calls": (1, 1000, 50), "timeout_s": (10, 86400, 900),
          "approvals_required": (1, 10, 1), "approval_ttl_hours": (1, 720, 24)}


def _agent(org_id: UUID, ref: Any) -> Agent | None:
    if not ref:
        return None
    try:
        return agents.get_agent(org_id=org_id, agent_id=ref)
    except NotFound:
        return None


def _clean_limits(values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (low, high, default) in LIMITS.items():
        raw = values.get(key)
        try:
            out[key] = int(raw) if raw not in (None, "") else default
            if not low <= out[key] <= high:
                raise ValueError
        except (TypeError, ValueError):
            errors[key] = f"A whole number from {low} to {high}."
    out["token_budget"] = None
    if values.get("token_budget") not in (None, ""):
        try:
            out["token_budget"] = int(values["token_budget"])
            if out["token_budget"] <= 0:
                raise ValueError
        except (TypeError, ValueError):
            errors["token_budget"] = "A number of tokens above zero (or leave it empty)."
    out["budget_usd"] = None
    if values.get("budget_usd") not in (None, ""):
        try:
            out["budget_usd"] = Decimal(str(values["budget_usd"])).quantize(Decimal("0.0001"))
            if not out["budget_usd"].is_finite() or out["budget_usd"] <= 0:
                raise InvalidOperation
        except (InvalidOperation, ValueError):
            errors["budget_usd"] = "An amount in dollars above zero, e.g. 5.00 (or leave it empty)."
    return out


def _clean_tasks(raw_tasks: list[Any], org_id: UUID, errors: dict[str, str]) -> list[dict[str, Any]]:
    tasks = []
    for index, raw in enumerate(raw_tasks or []):
        raw = raw if isinstance(raw, dict) else {}
        agent = _agent(org_id, raw.get("agent_id"))
        if agent is None:
            errors[f"tasks.{index}.agent_id"] = ("Choose an agent for this task." if not raw.get("agent_id") else
                                                 "That agent does not exist (deleted, or not in this organisation).")
        context = raw.get("context") or []
        if isinstance(context, str):
            context = [c.strip() for c in context.split(",") if c.strip()]
        tasks.append({"name": str(raw.get("name") or "").strip()[:100],
                      "description": str(raw.get("description") or "").strip(), "agent": agent,
                      "context": [str(c).strip() for c in context]})
    return tasks


def _clean_on_untrusted(values: dict[str, Any], errors: dict[str, str]) -> str:
    value = values.get("on_untrusted") or "hold"
    if value not in ON_UNTRUSTED:
        errors["on_untrusted"] = "Choose hold or deny."
        return "hold"
    return value


def _clean_flag(values: dict[str, Any], key: str, errors: dict[str, str]) -> bool:
    value = values.get(key, False)
    if value in (None, ""):
        return False
    if not isinstance(value, bool):
        errors[key] = "Give true or false."
        return False
    return value


def _clean_crew(values: dict[str, Any], *, org_id: UUID, crew: Crew | None) -> dict[str, Any]:
    errors: dict[str, str] = {}
    name = str(values.get("name") or "").strip()[:100]
    if not name:
        errors["name"] = "Give the crew a name."
    else:
        taken = Crew.objects.filter(org_id=org_id, name__iexact=name).exclude(id=crew.id if crew else None)
        if taken.exists():
            errors["name"] = f"A crew named {name!r} exists."
    process = values.get("process") or Process.SEQUENTIAL
    if process not in Process.values:
        errors["process"] = "Process is sequential or supervisor."
    inputs = validation.check_inputs(values.get("inputs") or [], errors)
    clean: dict[str, Any] = {"name": name, "description": str(values.get("description") or "").strip(),
                             "process": process, "inputs": inputs, "supervisor": None, "tasks": [], "members": [],
                             "routing_rules": [], **_clean_limits(values, errors),
                             "separation_of_duties": _clean_flag(values, "separation_of_duties", errors),
                             "on_untrusted": _clean_on_untrusted(values, errors)}
    if process == Process.SEQUENTIAL:
        clean["tasks"] = _clean_tasks(values.get("tasks") or [], org_id, errors)
        if not clean["tasks"]:
            errors["tasks"] = "A sequential crew needs at least one task."
        validation.check_tasks(clean["tasks"], input_names={i["name"] for i in inputs}, errors=errors)
    elif process == Process.SUPERVISOR:
        _clean_supervision(values, clean, org_id, errors)
    if errors:
        raise ValidationFailed("Please fix the highlighted fields: " + "; ".join(errors.values()), errors)
    return clean


def _clean_supervision(values: dict[str, Any], clean: dict[str, Any], org_id: UUID, errors: dict[str, str]) -> None:
    supervisor = _agent(org_id, values.get("supervisor_agent_id"))
    if supervisor is None:
        errors["supervisor_agent_id"] = "Choose the supervisor agent that routes the work."
    members: list[Agent] = []
    for ref in values.get("members") or []:
        agent = _agent(org_id, ref)
        if agent is None:
            errors["members"] = "One of the members does not exist (deleted, or not in this organisation)."
        elif supervisor is not None and agent.id == supervisor.id:
            errors["members"] = f"{agent.name} is the supervisor; it cannot also be one of its own members."
        elif agent.id not in {m.id for m in members}:
            members.append(agent)
    if not members and "members" not in errors:
        errors["members"] = "Choose at least one member for the supervisor to route to."
    clean["supervisor"], clean["members"] = supervisor, members
    clean["routing_rules"] = validation.check_routing_rules(values.get("routing_rules") or [],
                                                            member_names={m.name for m in members}, errors=errors)


def _store(crew: Crew, clean: dict[str, Any]) -> None:
    crew.tasks.all().delete()
    crew.members.all().delete()
    for position, task in enumerate(clean["tasks"]):
        CrewTask.objects.create(org_id=crew.org_id, crew=crew, position=position, name=task["name"],
                                description=task["description"], agent=task["agent"], context=task["context"])
    for position, agent in enumerate(clean["members"]):
        CrewMember.objects.create(org_id=crew.org_id, crew=crew, agent=agent, position=position)


def _write_version(*, crew: Crew, actor: Actor, before: dict | None) -> CrewVersion | None:
    crew = selectors.get_crew(org_id=crew.org_id, crew_id=crew.id)
    snapshot = selectors.crew_snapshot(crew)
    changes = agents.diff_snapshots(before, snapshot)
    if before is not None and not changes:
        return None
    number = (CrewVersion.objects.filter(crew=crew).order_by("-number").values_list("number", flat=True)
              .first() or 0) + 1
    if number != crew.version:
        crew.version = number
        crew.save(update_fields=["version", "updated_at"])
    return CrewVersion.objects.create(org_id=crew.org_id, crew=crew, number=number, snapshot=snapshot,
                                      changes=changes, actor_label=actor.label)


def _row_fields(clean: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in clean.items() if k not in ("tasks", "members")}


def create_crew(*, actor: Actor, **values: Any) -> Crew:
    """Creates a crew (fields as in CREW_FIELDS) with version 1. Writes `crew.created`.

    Raises PermissionDenied, ValidationFailed (field errors such as `tasks.1.context`).
    """
    actor.require("build")
    with transaction.atomic():
        clean = _clean_crew(values, org_id=actor.org_id, crew=None)
        crew = Crew.objects.create(org_id=actor.org_id, **_row_fields(clean))
        _store(crew, clean)
        _write_version(crew=crew, actor=actor, before=None)
        audit.record(org_id=actor.org_id, actor=actor, action="crew.created", target=crew, target_label=crew.name,
                     data={"process": crew.process})
    return selectors.get_crew(org_id=actor.org_id, crew_id=crew.id)


def _current_values(crew: Crew) -> dict[str, Any]:
    return {
        "name": crew.name, "description": crew.description, "process": crew.process,
        "supervisor_agent_id": crew.supervisor_id, "routing_rules": crew.routing_rules, "inputs": crew.inputs,
        "members": [m.agent_id for m in crew.members.all()],
        "tasks": [{"name": t.name, "description": t.description, "agent_id": t.agent_id, "context": t.context}
                  for t in crew.tasks.all()],
        "max_hops": crew.max_hops, "max_tool_calls": crew.max_tool_calls, "timeout_s": crew.timeout_s,
        "token_budget": crew.token_budget, "budget_usd": crew.budget_usd,
        "approvals_required": crew.approvals_required, "approval_ttl_hours": crew.approval_ttl_hours,
        "separation_of_duties": crew.separation_of_duties, "on_untrusted": crew.on_untrusted,
    }


def update_crew(*, actor: Actor, crew_id: UUID | str, **changes: Any) -> Crew:
    """Changes the given fields (others stay; `tasks`/`members` replace the lists).

    Writes a CrewVersion with the diff when anything changed, and `crew.updated`.
    Raises PermissionDenied, NotFound, ValidationFailed.
    """
    actor.require("build")
    with transaction.atomic():
        list(Crew.objects.select_for_update().filter(org_id=actor.org_id, id=crew_id))
        crew = selectors.get_crew(org_id=actor.org_id, crew_id=crew_id)
        before = selectors.crew_snapshot(crew)
        values = _current_values(crew)
        values.update({k: v for k, v in changes.items() if k in CREW_FIELDS})
        clean = _clean_crew(values, org_id=actor.org_id, crew=crew)
        fields = _row_fields(clean)
        for key, value in fields.items():
            setattr(crew, key, value)
        crew.save(update_fields=[*fields.keys(), "updated_at"])
        _store(crew, clean)
        version = _write_version(crew=crew, actor=actor, before=before)
        if version is not None:
            audit.record(org_id=actor.org_id, actor=actor, action="crew.updated", target=crew, target_label=crew.name,
                         data={"version": version.number, "changed": sorted(version.changes)})
    return selectors.get_crew(org_id=actor.org_id, crew_id=crew.id)


def set_crew_enabled(*, actor: Actor, crew_id: UUID | str, enabled: bool) -> Crew:
    """Disables (or re-enables) a crew: no new runs; history stays. Writes a version and an audit row."""
    actor.require("build")
    with transaction.atomic():
        crew = selectors.get_crew(org_id=actor.org_id, crew_id=crew_id)
        if crew.enabled == enabled:
            return crew
        before = selectors.crew_snapshot(crew)
        crew.enabled = enabled
        crew.save(update_fields=["enabled", "updated_at"])
        _write_version(crew=crew, actor=actor, before=before)
        audit.record(org_id=actor.org_id, actor=actor, action="crew.enabled" if enabled else "crew.disabled",
                     target=crew, target_label=crew.name)
    return selectors.get_crew(org_id=actor.org_id, crew_id=crew.id)


def delete_crew(*, actor: Actor, crew_id: UUID | str) -> None:
    """Deletes a crew; its last snapshot goes into the audit row. Raises PermissionDenied, NotFound."""
    actor.require("build")
    with transaction.atomic():
        crew = selectors.get_crew(org_id=actor.org_id, crew_id=crew_id)
        audit.record(org_id=actor.org_id, actor=actor, action="crew.deleted", target=crew, target_label=crew.name,
                     data={"snapshot": selectors.crew_snapshot(crew)})
        crew.delete()
