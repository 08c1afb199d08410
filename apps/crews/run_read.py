"""A crew as a run reads it: the crew, its tasks and members, and every agent it uses with what a run's snapshot
holds of them (the connection, the grants with their tools and servers, the context resources with theirs).

Two doors to the same read. `crew_for_run_plain` is the ORM's: `get_crew`, then `get_agents`, six queries one
after the other, each compiled anew, ~7 ms of CPU of a run start's ~10 (bench/run.py, the fixed cost row; issue
33). `crew_for_run` sends six statements built once per process (apps/core/rows.py) in one round trip, and reads
only the columns a snapshot reads: no server's secrets are decrypted and no definition is parsed for a snapshot
that does not hold them; the other columns are deferred and read on access, as any deferred field. The tests hold
the two doors to the same snapshot (tests/runs/test_run_start_read.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Model

from apps.agents import selectors as agents
from apps.agents.models import Agent, ContextResource, LlmConnection, ToolGrant
from apps.core.errors import NotFound
from apps.core.rows import Columns, cache_related, fetch_together, split
from apps.crews.models import Crew, CrewMember, CrewTask
from apps.crews.selectors import crew_agents, get_crew
from apps.registry.models import McpServer, Resource, Tool

# What a snapshot reads of the rows behind an agent (apps.agents.selectors.agent_snapshot, context_snapshot;
# apps.runs.services.tool_snapshot): never a connection's key or a server's env, headers or OAuth secrets.
CONNECTION_FIELDS = ("id", "org", "name", "provider", "base_url")
TOOL_FIELDS = ("id", "org", "server", "name", "qualified_name", "description", "input_schema", "annotations", "risk",
               "state", "definition_hash", "pinned_hash", "trusted_output", "outside_content")
SERVER_FIELDS = ("id", "org", "name", "trust_tier", "enabled", "trusted_output", "outside_content")
RESOURCE_FIELDS = ("id", "org", "server", "uri")


def crew_for_run_plain(*, org_id: UUID, crew_id: UUID | str) -> Crew:
    """The crew with every agent it uses (`crew_agents`) loaded as `get_agents` loads them, through the ORM.
    Raises NotFound for a crew, or an agent it uses, that is not the organisation's."""
    crew = get_crew(org_id=org_id, crew_id=crew_id)
    loaded = agents.get_agents(org_id=org_id, agent_ids=[agent.id for agent in crew_agents(crew)])
    _attach(crew, loaded)
    return crew


def crew_for_run(*, org_id: UUID, crew_id: UUID | str) -> Crew:
    """`crew_for_run_plain`'s crew, read in one round trip of prebuilt statements (see the module's docstring)."""
    return crew_from(fetch_together(crew_statements(org_id=org_id, crew_id=crew_id)))


def crew_statements(*, org_id: UUID, crew_id: UUID | str) -> list[tuple[str, list[Any]]]:
    """The statements `crew_for_run` sends, for a caller that sends its own reads in the same round trip
    (`apps.core.rows.fetch_together`); `crew_from` reads their rows. Raises NotFound for an id that is none."""
    reads = _reads()
    try:
        crew_key, org_key = reads.crew.param("id", crew_id), reads.crew.param("org", org_id)
    except (ValueError, ValidationError):
        raise NotFound("No such crew.") from None
    return reads.statements(crew_key, org_key)


def crew_from(found: Sequence[list[tuple]]) -> Crew:
    """The crew from the rows of `crew_statements`, in their order. Raises NotFound."""
    reads = _reads()
    crew_rows, task_rows, member_rows, agent_rows, grant_rows, context_rows = found
    if not crew_rows:
        raise NotFound("No such crew.")
    crew = reads.crew.instance(crew_rows[0])
    loaded = {agent.id: agent for agent in (_agent(reads, row) for row in agent_rows)}
    _prefetched(loaded.values(), "grants",
                (_with_server(row, reads.grant, reads.tool, reads.server, "tool") for row in grant_rows))
    _prefetched(loaded.values(), "context_resources",
                (_with_server(row, reads.context, reads.resource, reads.server, "resource") for row in context_rows))
    # The relations `crew_agents` follows, pointing to agents not yet loaded: `_attach` puts the loaded ones in.
    tasks = [reads.task.instance(row) for row in task_rows]
    members = [reads.member.instance(row) for row in member_rows]
    cache_related(crew, "tasks", tasks)
    cache_related(crew, "members", members)
    _attach(crew, loaded)
    return crew


def _attach(crew: Crew, loaded: dict[UUID, Agent]) -> None:
    """Points the crew's supervisor, members' and tasks' agents to the loaded agents."""
    def agent(agent_id: UUID) -> Agent:
        if agent_id not in loaded:
            raise NotFound("No such agent.")
        return loaded[agent_id]

    if crew.supervisor_id:
        crew.supervisor = agent(crew.supervisor_id)
    for part in (*crew.members.all(), *crew.tasks.all()):
        part.agent = agent(part.agent_id)


# --- the statements, built once per process -----------------------------------------------------------------

class _Reads:
    def __init__(self) -> None:
        self.crew = Columns.every(Crew, "c")
        self.task = Columns.every(CrewTask, "t")
        self.member = Columns.every(CrewMember, "m")
        self.agent = Columns.every(Agent, "a")
        self.connection = Columns(LlmConnection, CONNECTION_FIELDS, "l")
        self.grant = Columns.every(ToolGrant, "g")
        self.tool = Columns(Tool, TOOL_FIELDS, "o")
        self.server = Columns(McpServer, SERVER_FIELDS, "s")
        self.context = Columns.every(ContextResource, "x")
        self.resource = Columns(Resource, RESOURCE_FIELDS, "r")
        # Every agent the crew uses: its tasks', its members' and its supervisor (get_crew's relations).
        used = (f"SELECT agent_id FROM {self.task.table} WHERE crew_id = %s AND org_id = %s "  # noqa: S608
                f"UNION SELECT agent_id FROM {self.member.table} WHERE crew_id = %s AND org_id = %s "
                f"UNION SELECT supervisor_id FROM {self.crew.table} WHERE id = %s AND org_id = %s")
        self._sql = [
            f"SELECT {self.crew.sql} FROM {self.crew.table} c WHERE c.id = %s AND c.org_id = %s",  # noqa: S608
            f"SELECT {self.task.sql} FROM {self.task.table} t "  # noqa: S608
            "WHERE t.crew_id = %s AND t.org_id = %s ORDER BY t.position",
            f"SELECT {self.member.sql} FROM {self.member.table} m "  # noqa: S608
            "WHERE m.crew_id = %s AND m.org_id = %s ORDER BY m.position",
            f"SELECT {self.agent.sql}, {self.connection.sql} FROM {self.agent.table} a "  # noqa: S608
            f"JOIN {self.connection.table} l ON l.id = a.connection_id WHERE a.org_id = %s AND a.id IN ({used})",
            f"SELECT {self.grant.sql}, {self.tool.sql}, {self.server.sql} FROM {self.grant.table} g "  # noqa: S608
            f"JOIN {self.tool.table} o ON o.id = g.tool_id JOIN {self.server.table} s ON s.id = o.server_id "
            f"WHERE g.org_id = %s AND g.agent_id IN ({used})",
            f"SELECT {self.context.sql}, {self.resource.sql}, {self.server.sql} FROM {self.context.table} x "  # noqa: S608
            f"JOIN {self.resource.table} r ON r.id = x.resource_id JOIN {self.server.table} s ON s.id = r.server_id "
            f"WHERE x.org_id = %s AND x.agent_id IN ({used})",
        ]

    def statements(self, crew: Any, org: Any) -> list[tuple[str, list[Any]]]:
        pair, used = [crew, org], [crew, org] * 3
        return list(zip(self._sql, [pair, pair, pair, [org, *used], [org, *used], [org, *used]], strict=True))


@functools.cache
def _reads() -> _Reads:
    return _Reads()


def _agent(reads: _Reads, row: Sequence[Any]) -> Agent:
    agent_row, connection_row = split(row, reads.agent, reads.connection)
    agent = reads.agent.instance(agent_row)
    agent.connection = reads.connection.instance(connection_row)
    return agent


def _with_server(row: Sequence[Any], part: Columns, target: Columns, server: Columns, relation: str) -> Model:
    """A row of `part` (a grant, a context resource) joined to its `relation` (the tool, the resource) and that
    one's server: the part, with both attached."""
    part_row, target_row, server_row = split(row, part, target, server)
    obj, found = part.instance(part_row), target.instance(target_row)
    found.server = server.instance(server_row)
    setattr(obj, relation, found)
    return obj


def _prefetched(agents_: Iterable[Agent], name: str, parts: Iterable[Model]) -> None:
    """Each agent's `name` relation filled with its parts, as `prefetch_related` leaves it."""
    by_agent: dict[UUID, list[Model]] = {}
    for part in parts:
        by_agent.setdefault(part.agent_id, []).append(part)
    for agent in agents_:
        cache_related(agent, name, by_agent.get(agent.id, []))
