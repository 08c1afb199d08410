"""The "theirs" column of bench/run.py: LangGraph's prebuilt ReAct agent on PostgresSaver.

Runs in the bench venv (var/bench/venv, bench/requirements.txt), never in the project's:

    var/bench/venv/bin/python bench/langgraph_side.py steps  --db URL --sizes 5,20,100 --passes 5
    var/bench/venv/bin/python bench/langgraph_side.py resume --db URL --passes 20

and prints one JSON object on stdout. The agent is `langgraph.prebuilt.create_react_agent` (in
langgraph 1.x it is deprecated in favour of `langchain.agents.create_agent`, which lives in the
separate `langchain` package and builds the same model -> tools loop), checkpointed by
`PostgresSaver` with `durability="sync"` (every step's checkpoint is written before the next
step starts: the same promise as Airlock's commit per step). The chat model is a tiny
`BaseChatModel` that asks for `lookup(n)` until it has made `steps` calls, then says "done",
deciding from the message history only, like Airlock's scripted model; the tool returns the same
2 KB text as bench/lookup_server.py.

- steps: for each size, `passes` runs; the time between consecutive model calls (one step: the
  model's answer stored, the tool run, its result stored, the next model call) for every step,
  the run's total time, and for the 20-step runs the bytes the run left in the checkpoint tables
  (pg_column_size of its rows in checkpoints, checkpoint_blobs, checkpoint_writes).
- resume: a tool that calls `interrupt()` first (human in the loop); after the pause, the time
  from `invoke(Command(resume=True))` to the tool's code running past the interrupt, warm.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import uuid
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.postgres import PostgresSaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402
from payload import lookup_result  # noqa: E402

MODEL_CALLS: list[float] = []
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
    return lookup_result(n)


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


def steps(saver: PostgresSaver, sizes: list[int], passes: int, bytes_size: int) -> dict:
    out: dict = {"sizes": {}}
    for size in sizes:
        graph = create_react_agent(ScriptedChat(steps=size), [lookup], checkpointer=saver)
        intervals, totals, stored, rows = [], [], [], None
        for index in range(passes + 1):  # the first run warms the graph and the connection
            thread = str(uuid.uuid4())
            MODEL_CALLS.clear()
            started = time.perf_counter()
            result = graph.invoke({"messages": [("user", "go")]},
                                  {"configurable": {"thread_id": thread}, "recursion_limit": 2 * size + 10},
                                  durability="sync")
            total = time.perf_counter() - started
            assert result["messages"][-1].content == "done", result["messages"][-1]
            assert len(MODEL_CALLS) == size + 1
            if index == 0:
                continue
            intervals += [(b - a) * 1000 for a, b in itertools.pairwise(MODEL_CALLS)]
            totals.append(total * 1000)
            with saver.conn.cursor() as cur:
                stored.append(int(cur.execute(BYTES_SQL, {"t": thread}).fetchone()["bytes"]))
                rows = dict(cur.execute(ROWS_SQL, {"t": thread}).fetchone())
        out["sizes"][str(size)] = {"step_ms": intervals, "run_ms": totals, "bytes": stored}
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
    args = parser.parse_args()
    import langgraph.version

    with PostgresSaver.from_conn_string(args.db) as saver:
        saver.setup()
        if args.mode == "steps":
            report = steps(saver, [int(s) for s in args.sizes.split(",")], args.passes, args.bytes_size)
        else:
            report = resume(saver, args.passes)
    report["versions"] = {"langgraph": langgraph.version.__version__}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
