"""The "theirs" column of bench/run.py: LangGraph's prebuilt ReAct agent on PostgresSaver.

Runs in the bench venv (var/bench/venv, bench/requirements.txt), never in the project's:

    var/bench/venv/bin/python bench/langgraph_side.py steps  --db URL --sizes 5,20,100 --passes 5 [--tool mcp|record]
    var/bench/venv/bin/python bench/langgraph_side.py resume --db URL --passes 20

and prints one JSON object on stdout. The agent is `langgraph.prebuilt.create_react_agent` (in
langgraph 1.x it is deprecated in favour of `langchain.agents.create_agent`, which lives in the
separate `langchain` package and builds the same model -> tools loop), checkpointed by
`PostgresSaver` with `durability="sync"` (every step's checkpoint is written before the next
step starts: the same promise as Airlock's commit per step). The chat model is a tiny
`BaseChatModel` that asks for `lookup(n)` until it has made `steps` calls, then says "done",
deciding from the message history only, like Airlock's scripted model; the tool returns the same
2 KB text as bench/lookup_server.py.

`--tool` picks the agent's `lookup` tool:
- `python` (the default, the target row of bench/run.py): a plain in-process `@tool` function calling
  bench.payload.lookup_result.
- `mcp` (an info row: the same tool as Airlock's): bench/lookup_server.py over stdio MCP, started with
  the project's Python (`--server-python`, default .venv/bin/python; `-m bench.lookup_server`, cwd the
  repository root, as bench/engine.py registers it), through `langchain-mcp-adapters`: one
  `ClientSession` opened before the runs and kept open (`load_mcp_tools(session)`; the default
  MultiServerMCPClient would open a session per call). The session lives on an event loop in a
  thread of its own and the adapter's (async-only) tool gets a sync `func` that runs its coroutine
  there, so the graph, `invoke` and the sync PostgresSaver stay exactly as in the default mode (Airlock's
  pool works the same way: a loop thread the engine's thread hands each call to).
- `record` (the write-step row): a plain in-process `@tool` `record(n)` that stores record n in a dict and
  returns it, as bench/lookup_server.py's `record` does. LangGraph has no separate path for a write: the
  tool node runs it as it runs `lookup`.

- steps: for each size, `passes` runs; the time between consecutive model calls (one step: the
  model's answer stored, the tool run, its result stored, the next model call) for every step
  (`step_ms`), the time spent inside the tool per step (`tool_ms`: the tool function's body, or the
  whole adapter call including the hop to the session's loop) and their difference (`net_ms`), the
  run's total time (`run_ms`), the time from `invoke` to the first model call (`first_ms`: the first node
  running), the WAL written during the run (`wal_bytes`: pg_wal_lsn_diff around `invoke`, server-wide) and
  the database's growth (`grown_bytes`: pg_database_size around it), and for the 20-step runs the bytes the
  run left in the checkpoint tables (pg_column_size of its rows in checkpoints, checkpoint_blobs,
  checkpoint_writes).
- resume: a tool that calls `interrupt()` first (human in the loop); after the pause, the time
  from `invoke(Command(resume=True))` to the tool's code running past the interrupt, warm.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import json
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402
from payload import lookup_result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL_CALLS: list[float] = []
TOOL_CALLS: list[tuple[float, float]] = []  # (entered, left) of every tool call, perf_counter
RESUMED: list[float] = []


class ScriptedChat(BaseChatModel):
    """Calls `tool_name(n)` for n = 0 .. steps-1, one call per answer, then says done."""

    steps: int = 5
    tool_name: str = "lookup"

    @property
    def _llm_type(self) -> str:
        return "bench-scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        MODEL_CALLS.append(time.perf_counter())
        done = sum(1 for m in messages if isinstance(m, AIMessage))
        if done < self.steps:
            message = AIMessage(content="", tool_calls=[{"name": self.tool_name, "args": {"n": done},
                                                         "id": f"call-{done}", "type": "tool_call"}])
        else:
            message = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def lookup(n: int) -> str:
    """Returns record n (2 KB of text)."""
    entered = time.perf_counter()
    try:
        return lookup_result(n)
    finally:
        TOOL_CALLS.append((entered, time.perf_counter()))


class McpLookup:
    """bench/lookup_server.py over stdio MCP: one session, opened once, on an event loop thread of its own."""

    def __init__(self, server_python: str) -> None:
        self.server_python = server_python
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-session", daemon=True)
        self.ready: concurrent.futures.Future = concurrent.futures.Future()  # the adapter's tools
        self.stop: asyncio.Event | None = None

    def __enter__(self):
        self.thread.start()
        self.served = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        (self.tool,) = [t for t in self.ready.result(30) if t.name == "lookup"]
        coroutine = self.tool.coroutine

        def run(**arguments):
            entered = time.perf_counter()
            try:
                return asyncio.run_coroutine_threadsafe(coroutine(**arguments), self.loop).result(60)
            finally:
                TOOL_CALLS.append((entered, time.perf_counter()))

        self.tool.func = run  # the adapter's own tool (schema, content_and_artifact, errors), run from a sync graph
        return self

    async def _serve(self) -> None:
        # the stdio transport and the session are entered and left in this one task (anyio's cancel scopes)
        from langchain_mcp_adapters.tools import load_mcp_tools
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self.stop = asyncio.Event()
        params = StdioServerParameters(command=self.server_python, args=["-m", "bench.lookup_server"], cwd=str(ROOT))
        try:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.ready.set_result(await load_mcp_tools(session))
                await self.stop.wait()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def __exit__(self, *exc) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        try:
            self.served.result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


def _text(message: ToolMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else "".join(
        b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


def _tool_ms(calls: list[float], tools: list[tuple[float, float]]) -> list[float]:
    """Per step (model call k -> k+1): the time spent inside tool calls that started in it, in ms."""
    return [sum(left - entered for entered, left in tools if a <= entered < b) * 1000
            for a, b in itertools.pairwise(calls)]


RECORDS: dict[int, str] = {}


@tool
def record(n: int) -> str:
    """Stores record n and returns it (2 KB of text)."""
    entered = time.perf_counter()
    try:
        RECORDS[n] = lookup_result(n)
        return RECORDS[n]
    finally:
        TOOL_CALLS.append((entered, time.perf_counter()))


@tool
def refund(n: int) -> str:
    """A call a person must approve first."""
    interrupt({"n": n, "question": "approve?"})
    RESUMED.append(time.perf_counter())
    return lookup_result(n)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


BYTES_SQL = """
SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE c.thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE b.thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE w.thread_id = %(t)s) AS bytes
"""
ROWS_SQL = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints,
       (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = %(t)s) AS checkpoint_blobs,
       (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %(t)s) AS checkpoint_writes
"""


WRITTEN_SQL = "SELECT pg_current_wal_lsn()::text AS lsn, pg_database_size(current_database()) AS size"


def written_bytes(saver: PostgresSaver, before: dict) -> tuple[int, int]:
    """(WAL bytes, database growth) since `before` (a row of WRITTEN_SQL)."""
    with saver.conn.cursor() as cur:
        after = cur.execute(WRITTEN_SQL).fetchone()
        wal = cur.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn) AS d", (after["lsn"], before["lsn"]))
        return int(wal.fetchone()["d"]), int(after["size"]) - int(before["size"])


def steps(saver: PostgresSaver, sizes: list[int], passes: int, bytes_size: int, lookup_tool=lookup) -> dict:
    out: dict = {"sizes": {}}
    for size in sizes:
        graph = create_react_agent(ScriptedChat(steps=size, tool_name=lookup_tool.name), [lookup_tool],
                                   checkpointer=saver)
        intervals, tool_ms, totals, firsts, stored, wal, grown, rows = [], [], [], [], [], [], [], None
        for index in range(passes + 1):  # the first run warms the graph and the connection
            thread = str(uuid.uuid4())
            MODEL_CALLS.clear()
            TOOL_CALLS.clear()
            with saver.conn.cursor() as cur:
                before = cur.execute(WRITTEN_SQL).fetchone()
            started = time.perf_counter()
            result = graph.invoke({"messages": [("user", "go")]},
                                  {"configurable": {"thread_id": thread}, "recursion_limit": 2 * size + 10},
                                  durability="sync")
            total = time.perf_counter() - started
            assert result["messages"][-1].content == "done", result["messages"][-1]
            assert len(MODEL_CALLS) == size + 1 and len(TOOL_CALLS) == size, (len(MODEL_CALLS), len(TOOL_CALLS))
            answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
            assert len(answers) == size and _text(answers[-1]) == lookup_result(size - 1), answers[-1]
            if index == 0:
                continue
            wal_bytes, grown_bytes = written_bytes(saver, before)
            wal.append(wal_bytes)
            grown.append(grown_bytes)
            intervals += [(b - a) * 1000 for a, b in itertools.pairwise(MODEL_CALLS)]
            tool_ms += _tool_ms(MODEL_CALLS, TOOL_CALLS)
            totals.append(total * 1000)
            firsts.append((MODEL_CALLS[0] - started) * 1000)
            with saver.conn.cursor() as cur:
                stored.append(int(cur.execute(BYTES_SQL, {"t": thread}).fetchone()["bytes"]))
                rows = dict(cur.execute(ROWS_SQL, {"t": thread}).fetchone())
        out["sizes"][str(size)] = {"step_ms": intervals, "tool_ms": tool_ms,
                                   "net_ms": [step - call for step, call in zip(intervals, tool_ms, strict=True)],
                                   "run_ms": totals, "first_ms": firsts, "bytes": stored, "wal_bytes": wal,
                                   "grown_bytes": grown}
        if size == bytes_size:
            out["bytes"] = {"size": size, "per_run": stored, "rows": rows}
    return out


def resume(saver: PostgresSaver, passes: int) -> dict:
    graph = create_react_agent(ScriptedChat(steps=1, tool_name="refund"), [refund], checkpointer=saver)
    latencies = []
    for index in range(passes + 2):  # two warm-up rounds
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        paused = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
        assert "__interrupt__" in paused, paused
        RESUMED.clear()
        started = time.perf_counter()
        result = graph.invoke(Command(resume=True), config, durability="sync")
        assert result["messages"][-1].content == "done" and len(RESUMED) == 1
        if index >= 2:
            latencies.append((RESUMED[0] - started) * 1000)
    return {"resume_ms": latencies}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["steps", "resume"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--sizes", default="5,20,100")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--bytes-size", type=int, default=20)
    parser.add_argument("--tool", choices=["python", "mcp", "record"], default="python",
                        help="steps: the lookup tool in-process (default), bench/lookup_server.py over stdio MCP, "
                             "or the in-process write tool `record`")
    parser.add_argument("--server-python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="--tool mcp: the Python that runs bench/lookup_server.py (the project's)")
    args = parser.parse_args()
    import langgraph.version

    with PostgresSaver.from_conn_string(args.db) as saver:
        saver.setup()
        sizes = [int(s) for s in args.sizes.split(",")]
        if args.mode == "steps" and args.tool == "mcp":
            with McpLookup(args.server_python) as mcp_lookup:
                report = steps(saver, sizes, args.passes, args.bytes_size, lookup_tool=mcp_lookup.tool)
        elif args.mode == "steps":
            tool_fn = record if args.tool == "record" else lookup
            report = steps(saver, sizes, args.passes, args.bytes_size, lookup_tool=tool_fn)
        else:
            report = resume(saver, args.passes)
    from importlib.metadata import version

    report["versions"] = {"langgraph": langgraph.version.__version__}
    if args.mode == "steps":
        report["tool"] = args.tool
        if args.tool == "mcp":
            report["versions"] |= {p: version(p) for p in ("langchain-mcp-adapters", "mcp")}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
