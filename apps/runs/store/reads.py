"""The store's reads and per-step writes built once per process (apps/core/rows.py), and small shared helpers."""

from __future__ import annotations

import functools

from django.db import connection

from apps.agents.models import LlmConnection
from apps.approvals.models import ApprovalRequest, ApprovalStatus
from apps.core.rows import Columns, Inserts, Update
from apps.costs.models import UsageRecord
from apps.registry.models import McpServer, Tool
from apps.registry.pool import LIVE_SERVER_FIELDS
from apps.runs.models import CallState, Run, RunMessage, RunStep, StepKind, ToolCall

LIVE_TOOL_FIELDS = ("id", "org_id", "qualified_name", "state", "risk", "definition_hash", "pinned_hash", "server",
                    "trusted_output", "outside_content")


# The two reads of every engine step, as SQL built once per process from the models (apps/core/rows.py).
@functools.cache
def run_read() -> tuple[Columns, str]:
    run = Columns(Run, [f.name for f in Run._meta.concrete_fields if f.name not in ("snapshot", "inputs")], "r")
    return run, f"SELECT {run.sql} FROM {run.table} r WHERE r.id = %s"  # noqa: S608 (column names only)


@functools.cache
def live_tool_read() -> tuple[Columns, Columns, str]:
    tool, server = Columns(Tool, LIVE_TOOL_FIELDS, "t"), Columns(McpServer, LIVE_SERVER_FIELDS, "s")
    return tool, server, (f"SELECT {tool.sql}, {server.sql} FROM {tool.table} t JOIN {server.table} s "  # noqa: S608
                          "ON s.id = t.server_id WHERE t.org_id = %s AND t.qualified_name = %s")


# What a task reads once of the run for its books and limits (the store keeps them current after): the
# (agent, provider, model) of its model calls so far, for the rollup's first-call counts, and the calls past
# `proposed`, for the tool-call and repeat limits.
@functools.cache
def usage_read() -> tuple[Columns, str]:
    usage = Columns(UsageRecord, ["agent_id", "provider", "model"], "u")
    return usage, f"SELECT DISTINCT {usage.sql} FROM {usage.table} u WHERE u.org_id = %s AND u.run_id = %s"  # noqa: S608


@functools.cache
def decided_read() -> tuple[Columns, str]:
    calls = Columns(ToolCall, ["qualified_name", "args_hash"], "t")
    return calls, f"SELECT {calls.sql} FROM {calls.table} t WHERE t.run_id = %s AND t.state <> %s"  # noqa: S608


# A new task's first reads of the turn in progress and its last model call's ledger rows (with their
# approvals): a resumed run makes them between a person's decision and the approved call.
@functools.cache
def turn_read() -> tuple[Columns, str]:
    turn = Columns(RunStep, [f.name for f in RunStep._meta.concrete_fields], "s")
    return turn, f"SELECT {turn.sql} FROM {turn.table} s WHERE s.run_id = %s AND s.id = %s"  # noqa: S608


@functools.cache
def messages_read() -> tuple[Columns, str]:
    message = Columns(RunMessage, ["payload"], "m")
    return message, f"SELECT {message.sql} FROM {message.table} m WHERE m.turn_id = %s ORDER BY m.seq"  # noqa: S608


@functools.cache
def last_calls_read() -> tuple[Columns, Columns, str]:
    calls = Columns(ToolCall, [f.name for f in ToolCall._meta.concrete_fields], "t")
    requests = Columns(ApprovalRequest, [f.name for f in ApprovalRequest._meta.concrete_fields], "a")
    steps = RunStep._meta.db_table
    return calls, requests, (
        f"SELECT {calls.sql}, {requests.sql} FROM {calls.table} t "  # noqa: S608
        f"LEFT JOIN {requests.table} a ON a.id = t.approval_id "
        f"WHERE t.step_id = (SELECT l.id FROM {steps} l WHERE l.parent_id = %s AND l.kind = 'llm' "
        "ORDER BY l.position DESC LIMIT 1) ORDER BY t.position")


# A turn's start and end. The start: the run row locked (a turn's writes are the lease holder's, under the row's
# lock) with the position of the run's last step, which the store numbers the next steps from, in one statement;
# then the turn's cursor and hops, sent with the turn's other writes in one batch (apps.core.db.send_expected: the
# lease check). The end: the turn's step and the cursor, in the batch of its transaction's end.
@functools.cache
def run_lock_read() -> str:
    runs, steps = Run._meta.db_table, RunStep._meta.db_table
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""  # SQLite: one writer at a time
    return (f"SELECT (SELECT max(s.position) FROM {steps} s WHERE s.run_id = r.id) FROM {runs} r "  # noqa: S608
            f"WHERE r.id = %s{lock}")


# A run parked for people (RunStore.wait): the run row's lock, then what is pending, as two statements sent together.
@functools.cache
def park_lock_read() -> tuple[Columns, str]:
    run = Columns(Run, ["lease_owner", "state"], "r")
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return run, f"SELECT {run.sql} FROM {run.table} r WHERE r.id = %s{lock}"  # noqa: S608 (column names only)


@functools.cache
def pending_read() -> str:
    """The run's pending approval requests and its calls whose outcome is unknown: (requests, calls)."""
    quote = connection.ops.quote_name
    return (f"SELECT (SELECT count(*) FROM {quote(ApprovalRequest._meta.db_table)} "  # noqa: S608
            f"WHERE run_id = %s AND status = '{ApprovalStatus.PENDING}'), "
            f"(SELECT count(*) FROM {quote(ToolCall._meta.db_table)} WHERE run_id = %s "
            f"AND state = '{CallState.UNKNOWN}')")


@functools.cache
def cursor_update(fields: tuple[str, ...]) -> Update:
    return Update(Run, [*fields, "updated_at"], ["id", "lease_owner"])


# What a turn's model call reads once per task before it is made: how many model calls the turn has made (its step
# limit), whether any budget counts the agent's calls (apps.costs.selectors.budgets_statement), and the agent's
# connection as it is now (its key decrypted on read, never in the snapshot). Sent together (RunStore.model_calls).
@functools.cache
def turn_calls_read() -> str:
    return (f"SELECT count(*) FROM {RunStep._meta.db_table} WHERE parent_id = %s AND kind = "  # noqa: S608
            f"'{StepKind.LLM}'")


@functools.cache
def connection_read() -> tuple[Columns, str]:
    live = Columns(LlmConnection, ["id", "org", "base_url", "api_key"], "c")
    return live, f"SELECT {live.sql} FROM {live.table} c WHERE c.org_id = %s AND c.id = %s"  # noqa: S608


@functools.cache
def evidence_read() -> str:
    """A finished turn's calls that returned a result, in order (ToolCalls.evidence): id, tool, the result's text
    length, and the call and tool a `run.get_result` read. Built once: compiling its JSON lookups through the ORM
    cost ~1 ms at every turn's end. Filtered by the organisation, the run and the turn."""
    calls, steps = ToolCall._meta.db_table, RunStep._meta.db_table
    if connection.vendor == "postgresql":
        def key(name: str) -> str:
            return f"t.result ->> '{name}'"
    else:
        def key(name: str) -> str:
            return f"json_extract(t.result, '$.{name}')"
    return (f"SELECT t.id, t.qualified_name, length({key('text')}), {key('of_call')}, {key('tool')} "  # noqa: S608
            f"FROM {calls} t JOIN {steps} s ON s.id = t.step_id WHERE t.org_id = %s AND t.run_id = %s "
            f"AND s.parent_id = %s AND t.state = '{CallState.SUCCEEDED}' AND t.result IS NOT NULL "
            "ORDER BY s.position, t.position")


@functools.cache
def hand_back_update() -> Update:
    """A task's run back to the queue, only while this worker holds it and it is running (`RunStore.release`)."""
    return Update(Run, ["status", "lease_owner", "lease_expires_at", "updated_at"], ["id", "lease_owner", "status"])


@functools.cache
def turn_end_update() -> Update:
    return Update(RunStep, ["status", "status_reason", "output", "finished_at", "updated_at"], ["id"])


# The write of every model call's step (its ledger rows and their completion are apps.runs.ledger's).
@functools.cache
def step_inserts() -> Inserts:
    return Inserts(RunStep)
