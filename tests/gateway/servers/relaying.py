"""An MCP server of our own (SDK 2.x, stdio) that uses what the gateway relays: `steps` logs at three levels
and reports progress; `ask` asks for input (elicitation) and `summarise` for a model run (sampling), written
with resolvers so either protocol era works; `touch_note` changes the subscribable `note://today` and says so;
the `greeting` prompt and the `city://{name}/weather` template complete their arguments. A log message and
the elicitation's text quote SECRET_VALUE (its env): the gateway must mask it.

`python -m tests.gateway.servers.relaying`
"""

from __future__ import annotations

import os
from typing import Annotated

import anyio
from mcp.server import MCPServer
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, Resolve
from mcp.server.mcpserver.resolve import Elicit, Sample
from mcp.types import (
    Completion,
    CreateMessageResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

SECRET = os.environ.get("SECRET_VALUE", "")
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
mcp = MCPServer("relaying", version="1.0.0")
note = {"text": "first"}


class Answer(BaseModel):
    answer: str = Field(description="Your answer")


def ask_host(question: str) -> Elicit[Answer]:
    return Elicit(f"{question} (asked with {SECRET})", Answer)


def ask_model(text: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarise: {text}"))],
                  max_tokens=50, system_prompt="You write one-line summaries.")


@mcp.tool(annotations=READ)
async def steps(ctx: Context) -> str:
    """Works in three steps, logging and reporting progress as it goes."""
    await ctx.log("debug", "step details", logger_name="steps")
    for done in (1, 2, 3):
        await ctx.report_progress(done, 3, f"step {done} of 3")
        await anyio.sleep(0.02)
    await ctx.log("info", {"note": f"working with {SECRET}"}, logger_name="steps")
    await ctx.log("warning", "almost done", logger_name="steps")
    return "three steps done"


@mcp.tool(annotations=READ)
async def ask(question: str, answer: Annotated[ElicitationResult[Answer], Resolve(ask_host)]) -> str:
    """Asks the person at the host a question."""
    if answer.action == "accept":
        return f"they said {answer.data.answer}"
    return f"no answer: {answer.action}"


@mcp.tool(annotations=READ)
async def summarise(text: str, summary: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
    """Summarises a text with the host's model."""
    return f"summary: {getattr(summary.content, 'text', summary.content)}"


@mcp.tool(annotations=READ)
async def touch_note(text: str, ctx: Context) -> str:
    """Changes the note, and tells who subscribed to it."""
    note["text"] = text
    await ctx.notify_resource_updated("note://today")
    return "changed"


@mcp.resource("note://today", name="note", mime_type="text/plain")
def today() -> str:
    return note["text"]


@mcp.resource("city://{name}/weather", name="weather", mime_type="text/plain")
def weather(name: str) -> str:
    return f"sunny in {name}"


@mcp.prompt()
def greeting(language: str) -> str:
    """Greets in a language."""
    return f"Say hello in {language}."


@mcp.completion()
async def complete(ref, argument, context) -> Completion | None:
    if isinstance(ref, PromptReference) and argument.name == "language":
        return Completion(values=[v for v in ("english", "esperanto", "estonian") if v.startswith(argument.value)])
    if isinstance(ref, ResourceTemplateReference) and argument.name == "name":
        return Completion(values=[v for v in ("paris", "parma", "prague") if v.startswith(argument.value)])
    return None


if __name__ == "__main__":
    mcp.run("stdio")
