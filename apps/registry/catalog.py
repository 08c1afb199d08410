"""Known-good starting points for registering a server: the bundled order desk, and the MCP
project's reference servers with their command lines, what to install and the trust tier we
recommend (with why). Data only: registering goes through `services.create_server`, like any
other server, after the person has had a chance to adjust the fields.

Trusted tiers (official, internal) start the command as it is, with the worker's PATH, so
`uvx` and `npx -y` can fetch the package on first start. `third_party` servers run in the
sandbox, which has no network: their package must be installed on the worker machines first.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from apps.registry.models import Transport, TrustTier


@dataclass(frozen=True)
class CatalogEntry:
    key: str
    title: str
    summary: str
    source: str  # where the package comes from, as a person would look it up
    install: str  # what to have on the worker machines before the first sync
    trust_tier: str  # recommended
    tier_reason: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    notes: str = ""
    icon: str = "ti-server-2"

    @property
    def command_line(self) -> str:
        return " ".join([self.command, *self.args])

    def tier_caveat(self, tier: str) -> str:
        """Why the entry, as suggested, will not start under `tier` ('' when it will)."""
        if tier == TrustTier.THIRD_PARTY and self.command in FETCHERS:
            return (f"Not as suggested: the sandbox has no network, so {self.command} cannot fetch the package. "
                    "Install it on the worker machines first and give its installed command instead.")
        return ""

    def server_fields(self) -> dict:
        """Keyword arguments for `services.create_server`, as the catalog suggests them."""
        return {"name": self.key, "description": self.summary, "transport": Transport.STDIO,
                "trust_tier": self.trust_tier, "command": self.command, "args": list(self.args),
                "env": dict(self.env), "cwd": self.cwd}


def _order_desk() -> CatalogEntry:
    # Paths depend on where this installation lives, so the entry is built when asked for.
    return CatalogEntry(
        key="orders", title="Order desk (bundled demo)", icon="ti-package",
        summary="The bundled demo order desk: order lookups, refunds, customer deletion.",
        source="Ships with Airlock (apps/demo/order_desk.py)",
        install="Nothing: it runs on Airlock's own Python.",
        trust_tier=TrustTier.INTERNAL,
        tier_reason="Your own code, run by you: its annotations are trusted, so lookups are read, refunds are "
                    "write and deleting a customer is dangerous, straight after the first sync.",
        # Started as a script (standard library + mcp, no Django): under third_party the sandbox runs it from
        # its own work dir, where `-m apps...` would find no `apps` package.
        command=sys.executable, args=(str(Path(settings.BASE_DIR) / "apps" / "demo" / "order_desk.py"), "stdio"),
        cwd=str(settings.BASE_DIR), env={"ORDER_DESK_DATA": _order_desk_data()},
        notes="Its sample orders live in the JSON file named by ORDER_DESK_DATA; refunds are written there. "
              "Under third_party the sandbox keeps its own copy of that file in the server's work dir.",
    )


def _order_desk_data() -> str:
    """The data file, relative to the working directory when it lies under it: trusted tiers start in the
    installation's folder (the same file as always), the sandbox in the server's private, writable work dir."""
    data = Path(settings.VAR_DIR) / "order-desk.json"
    try:
        return str(data.relative_to(Path(settings.BASE_DIR).resolve()))
    except ValueError:
        return str(data)


FETCHERS = ("uvx", "npx")  # commands that download the package on first start
REFERENCE = "Reference server of the Model Context Protocol project (github.com/modelcontextprotocol/servers)"

ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        key="time", title="Time", icon="ti-clock",
        summary="Current time and time-zone conversion.",
        source=f"PyPI: mcp-server-time. {REFERENCE}.",
        install="uv on the worker machines (uvx fetches mcp-server-time on first start), "
                "or pip install mcp-server-time and use the command mcp-server-time.",
        trust_tier=TrustTier.OFFICIAL,
        tier_reason="It reads the clock and nothing else, and its read-only annotations are accurate: both tools "
                    "are read and usable at once.",
        command="uvx", args=("mcp-server-time", "--local-timezone", "UTC"),
    ),
    CatalogEntry(
        key="filesystem", title="Filesystem", icon="ti-folder",
        summary="Read, search and edit files inside the directories you name.",
        source=f"npm: @modelcontextprotocol/server-filesystem. {REFERENCE}.",
        install="Node.js on the worker machines (npx fetches the package on first start).",
        trust_tier=TrustTier.OFFICIAL,
        tier_reason="It touches only the directories given as arguments, and it marks its edits as writes: "
                    "reads run, writes follow each agent's policy. Sandboxed as third party, those directories "
                    "would be read-only.",
        command="npx", args=("-y", "@modelcontextprotocol/server-filesystem", "/srv/airlock-files"),
        notes="Replace /srv/airlock-files with the directories agents may use (one argument each).",
    ),
    CatalogEntry(
        key="git", title="Git", icon="ti-git-branch",
        summary="Read and change a local Git repository: status, diff, log, commit, branches.",
        source=f"PyPI: mcp-server-git. {REFERENCE}.",
        install="uv on the worker machines (uvx fetches mcp-server-git on first start), and git.",
        trust_tier=TrustTier.OFFICIAL,
        tier_reason="It works on the one repository you name; commits, resets and checkouts are writes, so with "
                    "an approve policy a person sees each one first.",
        command="uvx", args=("mcp-server-git", "--repository", "/srv/repo"),
        notes="Replace /srv/repo with the repository's path on the worker machines.",
    ),
    CatalogEntry(
        key="fetch", title="Fetch", icon="ti-world-download",
        summary="Fetch a web page and return it as Markdown.",
        source=f"PyPI: mcp-server-fetch. {REFERENCE}.",
        install="uv on the worker machines (uvx fetches mcp-server-fetch on first start).",
        trust_tier=TrustTier.OFFICIAL,
        tier_reason="It must reach the internet, which the third-party sandbox forbids. What it returns is "
                    "untrusted web content: grant it to agents that only read, and keep writes on approve.",
        command="uvx", args=("mcp-server-fetch",),
    ),
    CatalogEntry(
        key="memory", title="Memory", icon="ti-brain",
        summary="A small knowledge graph agents can add to and search, kept in one file.",
        source=f"npm: @modelcontextprotocol/server-memory. {REFERENCE}.",
        install="npm install -g @modelcontextprotocol/server-memory on the worker machines "
                "(the sandbox has no network, so npx cannot fetch it there).",
        trust_tier=TrustTier.THIRD_PARTY,
        tier_reason="It needs no network and no files but its own, so the sandbox costs nothing: its tools wait "
                    "for your review and pin, and every write waits for a person.",
        command="mcp-server-memory", env={"MEMORY_FILE_PATH": "/airlock-work/memory.jsonl"},
        notes="/airlock-work is the server's private, persistent folder inside the sandbox.",
    ),
    CatalogEntry(
        key="everything", title="Everything (test server)", icon="ti-flask",
        summary="Exercises every MCP feature: tools, resources, prompts, sampling, notifications.",
        source=f"npm: @modelcontextprotocol/server-everything. {REFERENCE}.",
        install="npm install -g @modelcontextprotocol/server-everything on the worker machines.",
        trust_tier=TrustTier.THIRD_PARTY,
        tier_reason="A test server whose tools do odd things on purpose: keep it sandboxed, for trying out "
                    "Airlock rather than for real work.",
        command="mcp-server-everything", args=("stdio",),
    ),
)


def catalog() -> list[CatalogEntry]:
    return [_order_desk(), *ENTRIES]


def catalog_entry(key: str) -> CatalogEntry | None:
    return next((entry for entry in catalog() if entry.key == key), None)
