"""CrewAI's side of the token benchmark (bench/tokens.py), run with var/bench/crewai's interpreter.

    var/bench/crewai/bin/python bench/crewai_side.py run --base-url http://127.0.0.1:PORT/LABEL/v1 --agents 4 \
        [--context previous|default]
    var/bench/crewai/bin/python bench/crewai_side.py count < bodies.json

`run`: a sequential crew of N agents, task K looking up record #K with a `lookup` tool that returns 2 KB
(bench/payload.py, the same text Airlock's bench tool returns) and building on task K-1's result, against the
fake model at --base-url (bench/fake_openai.py). `--context default` leaves each task's `context` unset, so
CrewAI hands every task the output of every earlier task (its default in a sequential crew); `previous` sets
`context=[the previous task]`. Prints the crew's final output as JSON.

`count`: input tokens of recorded request bodies (a JSON list of chat-completion request bodies on stdin)
with `o200k_base` from bpe-openai, in all and by part (bench/pipeline.input_tokens), one entry per body: both
sides of the comparison are counted here, by the same function.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import pipeline
from payload import lookup_result


def run(base_url: str, agents: int, context: str) -> dict:
    from crewai import LLM, Agent, Crew, Process, Task
    from crewai.tools import tool

    @tool("lookup")
    def lookup(n: int) -> str:
        """Returns record n (2 KB of text)."""
        return lookup_result(n)

    llm = LLM(model="openai/gpt-4o-mini", base_url=base_url, api_key="fake-key", max_retries=0)
    tasks: list[Task] = []
    for k in range(1, agents + 1):
        words = pipeline.agent(k)
        agent = Agent(role=words["role"], goal=words["goal"], backstory=words["backstory"], tools=[lookup],
                      llm=llm, allow_delegation=False, verbose=False, max_iter=5)
        extra = {"context": [tasks[-1]]} if context == "previous" and tasks else {}
        tasks.append(Task(description=pipeline.task(k), expected_output=pipeline.EXPECTED, agent=agent,
                          **extra))
    crew = Crew(agents=[t.agent for t in tasks], tasks=tasks, process=Process.sequential, verbose=False,
                memory=False)
    output = crew.kickoff()
    return {"output": str(output)[:500], "tasks": len(tasks)}


def count(bodies: list[dict]) -> list[dict[str, int]]:
    from bpe_openai import get_encoding

    encoding = get_encoding("o200k_base")
    return [pipeline.input_tokens(body, encoding.encode) for body in bodies]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["run", "count"])
    parser.add_argument("--base-url", default="")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--context", choices=["default", "previous"], default="default")
    args = parser.parse_args(argv)
    if args.mode == "run":
        print(json.dumps(run(args.base_url, args.agents, args.context)))
    else:
        print(json.dumps(count(json.load(sys.stdin))))


if __name__ == "__main__":
    main()
