"""A server's elicitation and sampling requests during one of a run's tool calls (the `CallHost` the pool
calls: apps/registry/host.py), answered for that run.

Unlike a held call, the MCP request is still open while a person answers a form: the worker's call waits
(up to the call's timeout, which the inbox shows) on a thread of the pool, polling the item's row; other
runs go on (each call to an asking server has a session of its own). Sampling runs the calling agent's own
model connection, checked against and counted to the run's budgets, and may wait for a person first.

Runs on the pool's threads, not the engine's: it writes through services and `append_event`, never
through the engine's store (which is not shared between threads).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from pydantic_ai import direct
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart

from apps.agents.providers import ConnectionSpec, build_model, run_blocking
from apps.approvals import questions
from apps.approvals import services as approvals
from apps.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus
from apps.costs import services as costs
from apps.costs.pricing import price_call
from apps.registry.pool import call_spec, pool
from apps.runs.engine.limits import DEFAULT_MAX_TOKENS, PreCallContext, check_before_call
from apps.runs.ledger import Totals, append_event, append_events
from apps.runs.models import Run

POLL_S = 0.25
MARGIN_S = 1.0  # the answer must reach the server before the call's own timeout fires
TEXT_KEPT = 4000


@dataclass
class RunCallHost:
    org_id: str
    run_id: str
    tool_call_id: str
    tool_id: str | None
    tool: str
    server: str
    agent: dict[str, Any]
    crew: dict[str, Any]
    connection: ConnectionSpec = field(repr=False)  # its key is decrypted: never in a repr or a log
    started_by_id: int | None = None
    hold_sampling: bool = False

    # --- elicitation -------------------------------------------------------------------------------

    def elicit(self, *, message: str, schema: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            request = self._open(ApprovalKind.ELICITATION, deadline, title=f"{self.server} asks: {message}",
                                 reason=f"{self.server} (called by {self.agent['name']}) asks for input.",
                                 context={"message": message[:TEXT_KEPT], "schema": schema})
            status, answer = self._wait(request.id, deadline)
            if status != ApprovalStatus.ANSWERED:
                return {"action": "cancel"}
            return answer
        finally:
            connection.close()  # a pool thread: its connection is not a request's to be closed for it

    # --- sampling ----------------------------------------------------------------------------------

    def sample(self, *, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        try:
            return self._sample(request, deadline)
        finally:
            connection.close()

    def _sample(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        prompt = sampling_prompt(request)
        refusal = self._budget_refusal(request)
        if refusal:
            append_event(self.run_id, "sampling.refused", tool_call_id=self.tool_call_id, server=self.server,
                         reason=refusal)
            return {"error": f"Airlock declined: {refusal}"}
        if self.hold_sampling:
            item = self._open(ApprovalKind.SAMPLING, deadline, title=f"{self.server} asks to run the model",
                              reason=f"{self.server} (called by {self.agent['name']}) asks to run "
                                     f"{self.agent['name']}'s model; its setting holds that for a person.",
                              context={"prompt": prompt}, arguments={"prompt": prompt})
            status, _ = self._wait(item.id, deadline)
            if status != ApprovalStatus.APPROVED:
                who = ApprovalRequest.objects.filter(id=item.id).values_list("decided_by_label", flat=True).first()
                return {"error": f"Airlock declined: a person did not allow this sampling request ({status}"
                                 + (f" by {who}" if who else "") + ")."}
        return self._run_model(request, prompt)

    def _run_model(self, request: dict[str, Any], prompt: dict[str, Any]) -> dict[str, Any]:
        """The agent's model on the server's prompt, its usage recorded to the run (a usage row, the run's
        totals) with the prompt and answer in a `sampling.completed` event."""
        started = time.monotonic()
        model_name = self.agent.get("model") or self.connection.provider
        model = build_model(self.connection, model_name=self.agent.get("model") or "", script=[])
        max_tokens = min(int(request.get("maxTokens") or DEFAULT_MAX_TOKENS), DEFAULT_MAX_TOKENS)
        settings: dict[str, Any] = {"max_tokens": max_tokens}
        if request.get("temperature") is not None:
            settings["temperature"] = request["temperature"]
        try:
            response = run_blocking(direct.model_request(model, model_messages(prompt), model_settings=settings))
        except Exception as exc:
            return {"error": f"The model call failed: {type(exc).__name__}"}
        latency_ms = int((time.monotonic() - started) * 1000)
        text = response.text or ""
        usage = response.usage
        tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
        model_name = response.model_name or model_name
        price = price_call(org_id=self.org_id, provider=self.connection.provider, model=model_name,
                           input_tokens=tokens_in, output_tokens=tokens_out)
        with transaction.atomic():
            costs.record_usage(org_id=self.org_id, run_id=self.run_id, crew_id=self.crew.get("id"),
                               agent_id=self.agent["id"], provider=self.connection.provider, model=model_name,
                               input_tokens=tokens_in, output_tokens=tokens_out, latency_ms=latency_ms, price=price)
            append_events(self.run_id, [("sampling.completed", {
                "tool_call_id": self.tool_call_id, "server": self.server, "agent": self.agent["name"],
                "model": model_name, "prompt": prompt, "answer": text[:TEXT_KEPT], "tokens_in": tokens_in,
                "tokens_out": tokens_out, "cost_usd": None if price.cost_usd is None else str(price.cost_usd),
                "latency_ms": latency_ms})],
                totals=Totals(tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=price.cost_usd or Decimal(0),
                              cost_unknown_calls=1 if price.cost_usd is None else 0))
        return {"text": text, "model": model_name, "stop_reason": "endTurn"}

    def _budget_refusal(self, request: dict[str, Any]) -> str:
        run = Run.objects.only("tokens_in", "tokens_out", "cost_usd").get(id=self.run_id)
        crew = self.crew
        hit = check_before_call(PreCallContext(
            org_id=self.org_id, run_id=self.run_id, crew_id=crew.get("id"), agent_id=self.agent["id"],
            agent_name=self.agent["name"], provider=self.connection.provider,
            model=self.agent.get("model") or self.connection.provider,
            max_tokens=min(int(request.get("maxTokens") or DEFAULT_MAX_TOKENS), DEFAULT_MAX_TOKENS),
            prompt_tokens=len(str(request.get("messages", ""))) // 4, run_tokens=run.tokens_in + run.tokens_out,
            run_cost_usd=run.cost_usd, token_budget=crew.get("token_budget"),
            budget_usd=Decimal(crew["budget_usd"]) if crew.get("budget_usd") else None))
        return hit.message if hit is not None else ""

    # --- the inbox item both share -----------------------------------------------------------------

    def _open(self, kind: str, deadline: float, *, title: str, reason: str, context: dict[str, Any],
              arguments: dict[str, Any] | None = None) -> ApprovalRequest:
        close_old_connections()
        expires_at = timezone.now() + timedelta(seconds=max(deadline - time.monotonic() - MARGIN_S, 0))
        worker = f"{socket.gethostname()}:{os.getpid()}"
        with transaction.atomic():
            request = questions.open_item(
                org_id=self.org_id, kind=kind, run_id=self.run_id, tool_call_id=self.tool_call_id,
                agent_id=self.agent["id"], tool_id=self.tool_id, title=title, reason=reason,
                context={**context, "ask": "approvers", "server": self.server, "tool": self.tool,
                         "agent": self.agent["name"], "crew": self.crew.get("name", ""), "worker": worker,
                         "call_expires_at": expires_at.isoformat()},
                expires_at=expires_at, requested_by_user_id=self.started_by_id, arguments=arguments)
            append_event(self.run_id, f"{kind}.requested", approval_id=str(request.id),
                         tool_call_id=self.tool_call_id, server=self.server, tool=self.tool,
                         expires_at=expires_at.isoformat(), worker=worker,
                         message=context.get("message", "")[:500])
        return request

    def _wait(self, approval_id: Any, deadline: float) -> tuple[str, dict[str, Any]]:
        """(status, answer) once a person acts, or ("expired", {}) at the call's deadline (the item expires)."""
        while time.monotonic() < deadline - MARGIN_S:
            row = ApprovalRequest.objects.filter(id=approval_id).values("status", "answer").first()
            if row is None:
                return ApprovalStatus.EXPIRED, {}
            if row["status"] != ApprovalStatus.PENDING:
                return row["status"], row["answer"] or {}
            time.sleep(POLL_S)
        with transaction.atomic():
            request = ApprovalRequest.objects.select_for_update().filter(id=approval_id).first()
            if request is not None and request.status == ApprovalStatus.PENDING:
                approvals.expire_request(request=request)
                append_event(self.run_id, f"{request.kind}.expired", approval_id=str(request.id),
                             tool_call_id=self.tool_call_id, reason="The call's timeout came first.")
                return ApprovalStatus.EXPIRED, {}
        status = request.status if request is not None else ApprovalStatus.EXPIRED
        return status, (request.answer or {}) if request is not None else {}


def sampling_prompt(request: dict[str, Any]) -> dict[str, Any]:
    """What the server asked the model, as kept in the trace: its system prompt and text messages."""
    messages = []
    for message in request.get("messages") or []:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        text = "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        messages.append({"role": message.get("role", "user"), "text": text[:TEXT_KEPT]})
    return {"system": (request.get("systemPrompt") or "")[:TEXT_KEPT], "messages": messages,
            "max_tokens": request.get("maxTokens")}


def model_messages(prompt: dict[str, Any]) -> list[Any]:
    parts: list[Any] = [SystemPromptPart(prompt["system"])] if prompt["system"] else []
    out: list[Any] = []
    for message in prompt["messages"]:
        if message["role"] == "assistant":
            if parts:
                out.append(ModelRequest(parts=parts))
                parts = []
            out.append(ModelResponse(parts=[TextPart(message["text"])]))
        else:
            parts.append(UserPromptPart(message["text"]))
    if parts:
        out.append(ModelRequest(parts=parts))
    return out


def for_call(store: Any, *, row: Any, tool: dict[str, Any], agent: dict[str, Any], server: Any) -> RunCallHost:
    """The host for one call of `row`, read now on the engine's thread (the agent's connection key too)."""
    run = store.run
    return RunCallHost(org_id=str(run.org_id), run_id=str(run.id), tool_call_id=str(row.id), tool_id=tool.get("id"),
                       tool=row.qualified_name, server=server.name, agent=agent,
                       crew={**run.snapshot.get("crew", {}), "name": run.crew_name},
                       connection=store.connection_spec(agent), started_by_id=run.started_by_id,
                       hold_sampling=bool(server.hold_sampling))


def may_ask(server: Any) -> bool:
    """Whether calls to this server get a session of their own, answering its elicitation and sampling."""
    return bool(getattr(server, "allow_elicitation", False) or getattr(server, "allow_sampling", False))


def hosted_call(store: Any, *, row: Any, tool: dict[str, Any], agent: dict[str, Any], server: Any,
                arguments: dict[str, Any]) -> Any:
    """The call on its own session, its server's requests answered for this run. Raises as `call_tool`."""

    spec = call_spec(tool["server_id"], org_id=store.run.org_id, server=server)
    host = for_call(store, row=row, tool=tool, agent=agent, server=server)
    return pool.start_hosted_call(spec, tool["name"], arguments, float(spec.timeout_s), host,
                                  allow_elicitation=bool(server.allow_elicitation),
                                  allow_sampling=bool(server.allow_sampling)).result()
