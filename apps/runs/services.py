"""Starting and cancelling runs.

The rest of a run's use cases are modules named for them: `decisions.py` (a person's vote and the resume,
expiry, unknown outcomes), `worker.py` (claim, advance, sweep); every tool-call and event write ends in
`ledger.py`.
"""

from __future__ import annotations

import functools
import logging
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction

from apps.accounts.actors import Actor
from apps.agents import selectors as agents
from apps.agents.prompts import compose_supervisor_prompt
from apps.audit import services as audit
from apps.core import tracing
from apps.core.db import end_transaction
from apps.core.errors import Conflict, ValidationFailed
from apps.core.rows import Columns, Inserts, fetch_together
from apps.costs import selectors as budgets
from apps.crews import run_read
from apps.crews import selectors as crews
from apps.registry.definitions import TRUSTED, output_trust, reaches_open_world
from apps.registry.models import Tool
from apps.runs import ledger
from apps.runs.ledger import append_event, lock_pending_requests, publish_status, send_events
from apps.runs.models import Run, RunStatus
from apps.runs.queue import enqueue_on_commit
from apps.runs.selectors import get_run

logger = logging.getLogger(__name__)


# --- start ---------------------------------------------------------------------------------------

def clean_inputs(declared: list[dict[str, Any]], given: dict[str, Any] | None) -> dict[str, Any]:
    """Checks and converts run inputs against the crew's declared inputs. Field errors as `inputs.<name>`."""
    given, errors, out = dict(given or {}), {}, {}
    for spec in declared or []:
        name, kind = spec["name"], spec.get("type", "string")
        value = given.pop(name, None)
        if value is None or value == "":
            if spec.get("required", True):
                errors[f"inputs.{name}"] = "Required."
            continue
        try:
            out[name] = _convert(value, kind)
        except (TypeError, ValueError):
            errors[f"inputs.{name}"] = {"integer": "A whole number.", "number": "A number.",
                                        "boolean": "true or false."}.get(kind, "Text.")
    for name in given:
        errors[f"inputs.{name}"] = "This crew does not declare this input."
    if errors:
        raise ValidationFailed("Some inputs are missing or invalid.", errors)
    return out


def _convert(value: Any, kind: str) -> Any:
    if kind == "integer":
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(str(value).strip()) if not isinstance(value, int | float) else int(value)
    if kind == "number":
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError
    if not isinstance(value, str | int | float):
        raise TypeError
    return str(value)


def build_snapshot(crew: Any) -> dict[str, Any]:
    """The crew, its agents (prompt, grants), the tool definitions they may use, and the versions. `crew` as
    `apps.crews.run_read` reads it: every agent it uses loaded with its grants and context resources."""
    agent_snaps, tools = {}, {}
    for agent in crews.crew_agents(crew):
        snap = {**agents.agent_snapshot(agent), "id": str(agent.id), "version": agent.version,
                "system_prompt": agents.system_prompt(agent)}
        if crew.supervisor_id == agent.id:
            snap["system_prompt"] = compose_supervisor_prompt(
                base_prompt=snap["system_prompt"], members=[(m.agent.name, m.agent.role) for m in crew.members.all()])
        agent_snaps[str(agent.id)] = snap
        for grant in agent.grants.all():
            tools[grant.tool.qualified_name] = tool_snapshot(grant.tool)
    crew_snap = {**crews.crew_snapshot(crew), "id": str(crew.id), "version": crew.version}
    return {"crew": crew_snap, "agents": agent_snaps, "tools": tools,
            "versions": {"crew": crew.version, "agents": {k: v["version"] for k, v in agent_snaps.items()}}}


def tool_snapshot(tool: Tool) -> dict[str, Any]:
    trust = output_trust(tool, tool.server)
    return {"id": str(tool.id), "server_id": str(tool.server_id), "server": tool.server.name, "name": tool.name,
            "qualified_name": tool.qualified_name, "description": tool.description, "input_schema": tool.input_schema,
            "risk": tool.risk, "state": tool.state, "pinned": tool.is_pinned, "trust_tier": tool.server.trust_tier,
            "definition_hash": tool.definition_hash,
            "open_world": reaches_open_world(tier=tool.server.trust_tier, annotations=tool.annotations),
            "output_trust": trust, "trusted_output": trust == TRUSTED}


def start_run(*, actor: Actor, crew_id: UUID | str, inputs: dict[str, Any] | None = None,
              idempotency_key: str | None = None, enqueue: bool = True) -> Run:
    """Validates inputs, snapshots the crew, writes a queued Run and enqueues `execute_run` on commit.

    The same `idempotency_key` returns the run it first created. Raises ValidationFailed (inputs,
    a disabled crew or agent), NotFound, PermissionDenied.
    """
    actor.require("runs.start")
    key = (idempotency_key or "").strip()[:200]
    # The run this key started, if any, and the crew: one round trip.
    columns, keyed_sql = _keyed_run_read()
    keyed = [(keyed_sql, [columns.param("org", actor.org_id), key])] if key else []
    found = fetch_together(keyed + run_read.crew_statements(org_id=actor.org_id, crew_id=crew_id))
    if key and found[0]:
        return _same_request(columns.instance(found[0][0]), crew_id)
    crew = run_read.crew_from(found[len(keyed):])
    if not crew.enabled:
        raise ValidationFailed(f"The crew {crew.name!r} is disabled.", {"crew": "This crew is disabled."})
    disabled = crews.disabled_agents(crew)
    if disabled:
        raise ValidationFailed(f"This crew uses disabled agents: {', '.join(disabled)}. Enable them first.",
                               {"crew": f"Disabled agents: {', '.join(disabled)}."})
    clean = clean_inputs(crew.inputs, inputs)
    snapshot = build_snapshot(crew)
    refusal = budgets.start_refusal(org_id=actor.org_id, crew_id=crew.id, agent_ids=list(snapshot["agents"]))
    if refusal:
        raise ValidationFailed(refusal, {"crew": refusal})
    try:
        with transaction.atomic(), tracing.span("run.start", crew=crew.name, org_id=actor.org_id) as root:
            run = Run(org_id=actor.org_id, crew=crew, crew_name=crew.name, inputs=clean, snapshot=snapshot,
                      started_by_id=actor.user_id, started_by_label=actor.label, idempotency_key=key,
                      state={"task_index": 0, "outputs": {}}, trace_parent=tracing.traceparent())
            if root is not None:
                root.set_attribute("airlock.run_id", str(run.id))
            # BEGIN, the run, its first event, the audit row and the COMMIT: one round trip. The audit row is
            # last: it locks the organisation's chain head until the commit.
            with end_transaction():
                _run_inserts().send([run])
                published = send_events(run.id, [("run.queued", {"crew": crew.name, "inputs": clean,
                                                                 "by": actor.label})])
                audit.send_record(org_id=actor.org_id, actor=actor, action="run.started", target=run,
                                  target_label=crew.name, data={"inputs": clean, "crew_version": crew.version})
            published()
            publish_status(run)
            if enqueue:
                enqueue_on_commit(run.id)
    except IntegrityError:
        existing = Run.objects.filter(org_id=actor.org_id, idempotency_key=key).first()
        if key and existing is not None:
            return _same_request(existing, crew_id)
        raise
    return run


@functools.cache
def _keyed_run_read() -> tuple[Columns, str]:
    """The organisation's run an Idempotency-Key started (unique per organisation: `run_org_idempotency_key`)."""
    columns = Columns.every(Run, "r")
    return columns, (f"SELECT {columns.sql} FROM {columns.table} r "  # noqa: S608 (names from the model only)
                     "WHERE r.org_id = %s AND r.idempotency_key = %s LIMIT 1")


@functools.cache
def _run_inserts() -> Inserts:
    """A new run's INSERT, built once per process (compiled by the ORM it was ~1 ms of every run's start). Its
    generated columns (final_cost_usd, final_tokens_in) are left to the database and read when asked for."""
    return Inserts(Run)


def _same_request(existing: Run, crew_id: UUID | str) -> Run:
    """The run a key started, when it is asked for the same crew again (else the key is misused)."""
    if str(existing.crew_id) != str(crew_id):
        message = "This Idempotency-Key already started a run of another crew; use a new key."
        raise ValidationFailed(message, {"Idempotency-Key": message})
    return existing


# --- cancel --------------------------------------------------------------------------------------

def cancel_run(*, actor: Actor, run_id: UUID | str) -> Run:
    """Queued or waiting: cancelled now. Running: flagged; the engine stops at its next step boundary."""
    actor.require("runs.start")
    run = _get(actor, run_id)
    if run.is_finished:
        raise Conflict(f"This run already ended ({run.status}).")
    with transaction.atomic():
        lock_pending_requests(run.id)  # requests before the run, as deciding one does
        locked = Run.objects.select_for_update().get(id=run.id)
        Run.objects.filter(id=run.id).update(cancel_requested=True)
        append_event(run.id, "run.cancel_requested", by=actor.label)
        audit.record(org_id=actor.org_id, actor=actor, action="run.cancelled", target=locked,
                     target_label=locked.crew_name)
        if locked.status in (RunStatus.QUEUED, RunStatus.WAITING):
            ledger.finish_run(run.id, org_id=locked.org_id, status=RunStatus.CANCELLED,
                              error=f"Cancelled by {actor.label}.", output=locked.state.get("last_output", ""))
    return Run.objects.get(id=run.id)


def _get(actor: Actor, run_id: UUID | str) -> Run:
    return get_run(org_id=actor.org_id, run_id=run_id)
