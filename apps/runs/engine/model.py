"""One model call: offer the tools policy allows, check limits, call with bounded retries, record.

Tool offers ask the policy point (`apps.agents.policy.decide`) with no arguments; anything not
denied outright is offered under its model-safe name.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from decimal import Decimal
from typing import Any

from django.utils import timezone
from pydantic_ai import direct
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from apps.agents.policy import CallFacts, decide
from apps.agents.providers import build_model, run_blocking
from apps.core import tracing
from apps.runs.engine.errors import StopRun, classify_model_error, egress_refusal, with_retries
from apps.runs.engine.handoff import OWN_TOOLS
from apps.runs.engine.hashing import args_hash
from apps.runs.engine.limits import DEFAULT_MAX_TOKENS, PreCallContext, check_before_call, estimate_tokens
from apps.runs.engine.names import model_tool_name, qualified_name
from apps.runs.engine.seam import Store
from apps.runs.models import RunStep

IDEMPOTENCY_ARGS = ("idempotency_key", "request_id")


def facts(tool: dict[str, Any] | None, grant: dict[str, Any] | None, *, name: str, arguments: dict | None,
          tainted: bool, live: Any = None, standing_approval: bool = False, taint_source: str = "",
          provenance: Any = None, on_untrusted: str = "hold") -> CallFacts:
    """CallFacts from the snapshot, overlaid with the registry's live state when given (dispatch).
    `provenance`: an apps.runs.engine.provenance.Provenance of the arguments, when worked out."""
    tool = tool or {}
    state, pinned, risk, tier = tool.get("state", "removed"), tool.get("pinned", False), tool.get("risk", "write"), \
        tool.get("trust_tier", "third_party")
    open_world = tool.get("open_world", True)
    if live is not None:
        state, risk, tier = live.state, live.risk, live.server.trust_tier
        pinned = live.is_pinned and live.definition_hash == tool.get("definition_hash")
        open_world = open_world or tier == "third_party"  # annotations are pinned: only the tier can change
    return CallFacts(tool=name, risk=risk, state=state, pinned=pinned, trust_tier=tier,
                     grant=(grant or {}).get("policy"), condition=(grant or {}).get("condition", ""),
                     arguments=arguments, tainted=tainted, standing_approval=standing_approval,
                     open_world=open_world, taint_source=taint_source, on_untrusted=on_untrusted,
                     unrequested=getattr(provenance, "unrequested", ()), copied=getattr(provenance, "copied", ()),
                     copied_source=getattr(provenance, "source", ""))


def offered_tools(agent: dict[str, Any], tools: dict[str, dict[str, Any]], *, tainted: bool) -> dict[str, str]:
    """{model tool name: qualified name} of what this agent may see now."""
    offered = {}
    for grant in agent.get("grants", []):
        name = grant["tool"]
        if decide(facts(tools.get(name), grant, name=name, arguments=None, tainted=tainted)).offered:
            offered[model_tool_name(name)] = name
    return offered


def tool_definitions(offered: dict[str, str], tools: dict[str, dict[str, Any]]) -> list[ToolDefinition]:
    """The registry's tools from the run snapshot, and the run's own (engine/handoff.py) when offered."""
    definitions = []
    for safe, name in offered.items():
        tool = tools.get(name) or OWN_TOOLS[name]
        definitions.append(ToolDefinition(name=safe, description=tool.get("description") or name,
                                          parameters_json_schema=tool.get("input_schema") or {"type": "object"}))
    return definitions


def call_model(store: Store, *, turn: RunStep, agent: dict[str, Any], messages: list[ModelMessage],
               offered: dict[str, str], turn_offset: int) -> Any:
    """Checks limits, calls the model (retrying transient errors), records the call and its proposed tool calls."""
    run, snapshot = store.run, store.run.snapshot
    tools = snapshot.get("tools", {})
    definitions = tool_definitions(offered, tools)
    conn = agent["connection"]
    provider, model_name = conn["provider"], agent.get("model") or conn["provider"]
    crew = snapshot["crew"]
    ctx = PreCallContext(
        org_id=run.org_id, run_id=run.id, crew_id=crew.get("id"), agent_id=agent["id"], agent_name=agent["name"],
        provider=provider, model=model_name, max_tokens=DEFAULT_MAX_TOKENS,
        prompt_tokens=estimate_tokens([d.__dict__ for d in definitions], chars=store.history_chars(turn)),
        run_tokens=run.tokens_in + run.tokens_out, run_cost_usd=store.run_cost(),
        token_budget=crew.get("token_budget"),
        budget_usd=Decimal(crew["budget_usd"]) if crew.get("budget_usd") else None,
        has_budgets=store.has_budgets(agent["id"]))
    hit = check_before_call(ctx)
    if hit is not None:
        raise StopRun("limit_exceeded", hit.message, "limit")
    model = build_model(store.connection_spec(agent), model_name=agent.get("model") or "", script=agent.get("script"),
                        inputs=run.inputs, turn_offset=turn_offset)
    params = ModelRequestParameters(function_tools=definitions)
    settings: dict[str, Any] = {"max_tokens": DEFAULT_MAX_TOKENS}
    if agent.get("temperature") is not None:
        settings["temperature"] = agent["temperature"]

    def once():
        return run_blocking(asyncio.wait_for(direct.model_request(
            model, messages, model_request_parameters=params, model_settings=settings), timeout=120))

    def on_retry(attempt: int, delay: float, exc: BaseException) -> None:
        store.event("retry", what="model", agent=agent["name"], attempt=attempt, delay_s=round(delay, 2),
                    error=store.redact_outside(str(exc))[:300])

    store.commit_held()  # the last step's writes are on record before the model takes its time
    started, began = time.monotonic(), timezone.now()
    try:
        response = with_retries(once, classify=classify_model_error, on_retry=on_retry)
    except Exception as exc:
        kind, reason = classify_model_error(exc), egress_refusal(exc) or exc
        # whole: the store redacts it before cutting it short (a cut secret would no longer match)
        raise StopRun("failed", f"The model call for {agent['name']} failed ({kind}): {reason}", kind) from exc
    latency_ms = int((time.monotonic() - started) * 1000)
    calls = [proposed_call(part, offered=offered, tools=tools)
             for part in response.parts if isinstance(part, ToolCallPart)]
    tracing.record("model.call", start=began, end=timezone.now(), agent=agent["name"], provider=provider,
                   model=response.model_name or model_name, input_tokens=response.usage.input_tokens,
                   output_tokens=response.usage.output_tokens, tool_calls=len(calls))
    return store.record_model_call(turn=turn, messages=[*messages, response], response=response, provider=provider,
                                   model=response.model_name or model_name, latency_ms=latency_ms, calls=calls)


def proposed_call(part: ToolCallPart, *, offered: dict[str, str], tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A ledger row's fields for one tool call the model asked for."""
    name = qualified_name(part.tool_name, offered=offered, known=frozenset(tools))
    try:
        arguments = part.args_as_dict()
    except Exception:  # malformed JSON from the model: keep it visible, the schema check refuses it
        arguments = {"_raw": str(part.args)[:2000]}
    tool = tools.get(name) or {}
    key = f"airlock-{uuid.uuid4().hex}"
    slot = idempotency_argument(tool)
    if slot and not arguments.get(slot):
        arguments = {**arguments, slot: key}  # before hashing: the approver sees it, the tool dedupes on it
    return {"call_id": part.tool_call_id or f"call-{name}", "tool_id": tool.get("id"), "qualified_name": name,
            "model_tool_name": part.tool_name, "arguments": arguments, "args_hash": args_hash(arguments),
            "definition_hash": tool.get("definition_hash", ""), "idempotency_key": key}


def idempotency_argument(tool: dict[str, Any] | None) -> str | None:
    """The argument through which a tool takes an idempotency key, if its schema declares one."""
    properties = ((tool or {}).get("input_schema") or {}).get("properties") or {}
    return next((name for name in IDEMPOTENCY_ARGS if name in properties), None)
