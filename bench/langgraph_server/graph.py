"""LangGraph's side of bench/approval.py, served by LangGraph's own server (`langgraph dev`, langgraph-cli[inmem]).

agent -> approval -> tools -> END, compiled without a checkpointer (the server keeps the threads). The agent is
a fake chat model that always asks for `add(2, 3)`; `approval` calls `interrupt()` and goes on only with
"approve"; the tool's first act is to append `time.time()` to BENCH_STAMP_FILE, as Airlock's approved call does
(bench/stamp_server.py). Runs in var/bench/langgraph-server (bench/requirements-langgraph-server.txt), never in
the project's environment.
"""

from __future__ import annotations

import itertools
import os
import time

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers (the call a person approves first)."""
    started = time.time()
    with open(os.environ["BENCH_STAMP_FILE"], "a") as stamps:
        stamps.write(f"{started!r}\n")
    return a + b


model = GenericFakeChatModel(messages=itertools.cycle([AIMessage("", tool_calls=[
    {"name": "add", "args": {"a": 2, "b": 3}, "id": "call-add", "type": "tool_call"}])]))


def agent(state: MessagesState) -> dict:
    return {"messages": [model.invoke(state["messages"])]}


def approval(state: MessagesState) -> dict:
    if interrupt({"question": "approve add(2, 3)?"}) != "approve":
        raise ValueError("not approved")
    return {}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("approval", approval)
builder.add_node("tools", ToolNode([add]))
builder.add_edge(START, "agent")
builder.add_edge("agent", "approval")
builder.add_edge("approval", "tools")
builder.add_edge("tools", END)
graph = builder.compile()
