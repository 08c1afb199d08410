"""What each process measures as it works, for Prometheus (`/metrics`, apps/web/metrics.py).

Web, gateway and worker processes each record into these instruments. With
`PROMETHEUS_MULTIPROC_DIR` set (the compose stack, `scripts/run`), prometheus-client writes them to
files in that shared directory and the web process's `/metrics` adds every process's up; without
it they stay in this process (a test, a single process). Recording is a few microseconds: no
metric here touches the database. What is better read from the ledger at scrape time (runs by
status, pending approvals, queue depth, heartbeats, budgets) is read there instead.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# Buckets in seconds: a step is milliseconds, a model call up to a minute, a person hours.
FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
HUMAN = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600)

STEP_SECONDS = Histogram("airlock_step_seconds",
                         "Time of one engine step (a model call or the tool calls it asked for).",
                         ["outcome"], buckets=FAST)
TOOL_CALL_SECONDS = Histogram("airlock_tool_call_seconds", "Time from dispatch to result of a tool call.",
                              ["state", "source"], buckets=FAST)
APPROVAL_DECISION_SECONDS = Histogram("airlock_approval_decision_seconds",
                                      "Time from a call being held to a person's final decision.",
                                      ["decision"], buckets=HUMAN)
GATEWAY_CALLS = Counter("airlock_gateway_calls", "Tool calls through the MCP gateway, by what happened.",
                        ["outcome"])


def observe_tool_call(*, state: str, source: str, dispatched_at, finished_at) -> None:
    if dispatched_at is not None and finished_at is not None:
        TOOL_CALL_SECONDS.labels(state=state, source=source).observe((finished_at - dispatched_at).total_seconds())
