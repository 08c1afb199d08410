"""Reading the MCP configs people already have, and registering the servers in them.

Four shapes are read: Claude Desktop's `mcpServers` (also Claude Code's `.mcp.json`, which adds `type`, `url`
and `headers`), VS Code's `mcp.json` (`servers`, with `inputs` for the secrets it asks for), and an MCP
Registry `server.json` (`packages` to install, `remotes` to reach), bare or wrapped as the registry's API
returns it (`{"server": {...}}`). `preview` only reads; `import_servers` registers the chosen entries one by one
through `services.create_server`, so each gets the same checks (egress guard for URLs, sandbox for third-party
code) and either is registered whole or not at all, with its own error.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from apps.accounts.actors import Actor
from apps.core.errors import Conflict, PermissionDenied, ValidationFailed
from apps.registry import selectors, services
from apps.registry.definitions import server_name_error
from apps.registry.models import Transport, TrustTier

MAX_CONFIG_CHARS = 200_000
PLACEHOLDER_RE = re.compile(r"\$\{(input|env):([^}]+)\}")
# Commands that download and run a package someone else published.
FETCHERS = frozenset({"npx", "uvx", "pipx", "bunx", "pnpx", "docker", "podman", "deno"})
INTERPRETERS = frozenset({"python", "python3", "node", "bun", "ruby", "bash", "sh", "uv"})
# What a registry package's `runtimeHint` falls back to, per registry.
RUNTIME = {"npm": ("npx", ["-y"]), "pypi": ("uvx", []), "oci": ("docker", ["run", "-i", "--rm"])}


@dataclass
class ImportEntry:
    """One server found in a config, as it would be registered, and what the preview says about it."""

    source_name: str
    name: str
    transport: str
    trust_tier: str
    tier_reason: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    description: str = ""
    conflict: bool = False  # its name is taken (by a registered server or an earlier entry of the file)
    suggested_name: str = ""  # a free name to register it under instead
    notes: list[str] = field(default_factory=list)  # e.g. a secret the file asks for that must be filled in
    problem: str = ""  # why it cannot be imported as it stands (e.g. an SSE-only server)

    def view(self) -> dict[str, Any]:
        """The preview of it: env and header values masked, keys shown."""
        data = asdict(self)
        data["env"] = dict.fromkeys(sorted(self.env), "•••")
        data["headers"] = dict.fromkeys(sorted(self.headers), "•••")
        return data


@dataclass
class ImportResult:
    entry: str  # its name in the preview
    name: str  # the name it was (or would have been) registered under
    ok: bool
    server_id: str = ""
    error: str = ""
    errors: dict[str, str] = field(default_factory=dict)


# --- reading -------------------------------------------------------------------------------------

def _fail(message: str) -> ValidationFailed:
    return ValidationFailed(message, {"config": message})


def load_config(text: str) -> dict[str, Any]:
    if len(text or "") > MAX_CONFIG_CHARS:
        raise _fail(f"At most {MAX_CONFIG_CHARS} characters.")
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise _fail(f"Not JSON: {e.msg} at line {e.lineno}, column {e.colno}.") from None
    if not isinstance(data, dict):
        raise _fail("Give a JSON object.")
    return data


def detect_format(data: dict[str, Any]) -> str:
    if isinstance(data.get("server"), dict) and ("packages" in data["server"] or "remotes" in data["server"]):
        return "server.json"
    if "packages" in data or "remotes" in data:
        return "server.json"
    if isinstance(data.get("mcpServers"), dict):
        return "mcpServers"
    if isinstance(data.get("servers"), dict):
        return "vscode"
    if isinstance(data.get("mcp"), dict) and isinstance(data["mcp"].get("servers"), dict):  # VS Code settings.json
        return "vscode"
    raise _fail("Not a config Airlock knows: expected `mcpServers` (Claude Desktop, .mcp.json), `servers` "
                "(VS Code mcp.json) or `packages`/`remotes` (an MCP Registry server.json).")


def suggest_tier(*, command: str = "", args: list[str] | None = None, url: str = "",
                 from_registry: bool = False) -> tuple[str, str]:
    """The tier a new server most likely deserves, and why. Only a local program of the organisation's own
    counts as internal: anything downloaded from a package registry, started through a fetcher (npx, uvx,
    docker...) or reached at someone's URL is third-party code until an admin says otherwise, because the
    tier decides whether its annotations are believed and whether it runs sandboxed."""
    if from_registry:
        return TrustTier.THIRD_PARTY, "A package from a public registry: someone else's code."
    if url:
        return TrustTier.THIRD_PARTY, "A remote service: its annotations are its owner's claims."
    program = command.rsplit("/", 1)[-1]
    if program in FETCHERS:
        return TrustTier.THIRD_PARTY, f"{program} downloads and runs a published package: someone else's code."
    first = next((a for a in args or [] if not a.startswith("-")), "")
    if _local_path(command) or (program.rstrip("0123456789.") in INTERPRETERS and _local_path(first)):
        return TrustTier.INTERNAL, "A program at a local path: most likely your team's own code."
    return TrustTier.THIRD_PARTY, "A program Airlock cannot place: treated as someone else's until you say."


def _local_path(value: str) -> bool:
    return value.startswith(("/", "./", "../", "~/")) or bool(re.match(r"^[A-Za-z]:\\", value))


def _airlock_name(raw: str) -> str:
    """A name Airlock accepts from a config's key or a registry name (`io.github.user/weather` -> `weather`)."""
    name = raw.rsplit("/", 1)[-1].lower()
    name = re.sub(r"[^a-z0-9-]+", "-", name).strip("-")
    if not name or not name[0].isalpha():
        name = f"mcp-{name}".rstrip("-")
    return name[:32].rstrip("-")


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _placeholders(entry: ImportEntry, inputs: dict[str, dict[str, Any]]) -> None:
    """VS Code `${input:id}` and `${env:NAME}` values are asked for or read on the host: Airlock has neither,
    so the value is left empty and the preview says what to fill in."""
    for kind, values in (("env", entry.env), ("header", entry.headers)):
        for key, value in values.items():
            if match := PLACEHOLDER_RE.search(value):
                source, ref = match.groups()
                what = inputs.get(ref, {}).get("description") or ref
                values[key] = ""
                entry.notes.append(f"{kind} {key}: the file asks for {what!r} ({source}); fill it in after import.")
    if any(PLACEHOLDER_RE.search(a) for a in entry.args):
        entry.notes.append("Its arguments name an input or a host variable: edit them after import.")


def _host_entry(source_name: str, spec: Any, inputs: dict[str, dict[str, Any]]) -> ImportEntry:
    spec = spec if isinstance(spec, dict) else {}
    kind = str(spec.get("type") or ("http" if spec.get("url") else "stdio")).lower()
    entry = ImportEntry(source_name=source_name, name=_airlock_name(source_name), transport=Transport.STDIO,
                        trust_tier="", tier_reason="")
    if kind in ("http", "streamable-http", "streamablehttp", "sse"):
        entry.transport, entry.url = Transport.HTTP, str(spec.get("url") or "")
        entry.headers = _string_map(spec.get("headers"))
        if kind == "sse":
            entry.problem = "An SSE-only server: Airlock speaks Streamable HTTP; check its URL for an /mcp endpoint."
    else:
        entry.command, entry.args = str(spec.get("command") or ""), _strings(spec.get("args"))
        entry.env, entry.cwd = _string_map(spec.get("env")), str(spec.get("cwd") or "")
        if spec.get("envFile"):
            entry.notes.append("It reads an envFile on the host: add those variables after import.")
    entry.trust_tier, entry.tier_reason = suggest_tier(command=entry.command, args=entry.args, url=entry.url)
    _sandbox_note(entry)
    _placeholders(entry, inputs)
    return entry


def _sandbox_note(entry: ImportEntry) -> None:
    if entry.trust_tier == TrustTier.THIRD_PARTY and entry.command.rsplit("/", 1)[-1] in FETCHERS:
        entry.notes.append(f"The third-party sandbox has no network, so {entry.command} cannot download there: "
                           "install the package on the worker machines and use its command.")


def _registry_entries(server: dict[str, Any]) -> list[ImportEntry]:
    base = _airlock_name(str(server.get("name") or "server"))
    description = str(server.get("description") or "")[:300]
    tier, reason = suggest_tier(from_registry=True)
    found: list[ImportEntry] = []
    for package in server.get("packages") or []:
        if not isinstance(package, dict):
            continue
        registry = str(package.get("registryType") or package.get("registry_name") or "")
        identifier = str(package.get("identifier") or package.get("name") or "")
        version = str(package.get("version") or "")
        entry = ImportEntry(source_name=f"{server.get('name')} ({registry} {identifier})", name=base,
                            transport=Transport.STDIO, trust_tier=tier, tier_reason=reason, description=description)
        transport = (package.get("transport") or {}).get("type", "stdio")
        if transport != "stdio":
            entry.problem = f"A package served over {transport}: start it yourself and import its URL."
        default_command, default_args = RUNTIME.get(registry, ("", []))
        entry.command = str(package.get("runtimeHint") or default_command)
        if not entry.command:
            entry.problem = entry.problem or f"Airlock does not know how to start a {registry or 'unknown'} package."
        pinned = {"npm": f"{identifier}@{version}", "pypi": f"{identifier}=={version}",
                  "oci": identifier if ":" in identifier.rsplit("/", 1)[-1] else f"{identifier}:{version}"}
        target = pinned.get(registry, identifier) if version else identifier
        runtime_args = _arguments(package.get("runtimeArguments"), entry)
        entry.args = [*(runtime_args or (default_args if entry.command == default_command else [])), target,
                      *_arguments(package.get("packageArguments"), entry)]
        for variable in package.get("environmentVariables") or package.get("environment_variables") or []:
            if isinstance(variable, dict) and variable.get("name"):
                entry.env[str(variable["name"])] = "" if variable.get("isSecret") else str(
                    variable.get("default") or variable.get("value") or "")
                if variable.get("isRequired") and not entry.env[str(variable["name"])]:
                    entry.notes.append(f"env {variable['name']}: required"
                                       f"{' (a secret)' if variable.get('isSecret') else ''}; fill it in.")
        _sandbox_note(entry)
        found.append(entry)
    for remote in server.get("remotes") or []:
        if not isinstance(remote, dict):
            continue
        entry = ImportEntry(source_name=f"{server.get('name')} ({remote.get('type')} {remote.get('url')})",
                            name=base, transport=Transport.HTTP, url=str(remote.get("url") or ""),
                            trust_tier=tier, tier_reason="A remote service: its annotations are its owner's claims.",
                            description=description)
        variables = remote.get("variables") or {}
        for key, variable in variables.items() if isinstance(variables, dict) else ():
            default = str((variable or {}).get("default") or "")
            if default:
                entry.url = entry.url.replace("{" + key + "}", default)
                entry.notes.append(f"URL {{{key}}} set to its default {default!r}.")
        if re.search(r"\{[^}]+\}", entry.url):
            entry.problem = "Its URL has a variable with no default: fill it in and import the URL."
        if remote.get("type") == "sse":
            entry.problem = "An SSE-only server: Airlock speaks Streamable HTTP."
        for header in remote.get("headers") or []:
            if isinstance(header, dict) and header.get("name"):
                entry.headers[str(header["name"])] = "" if header.get("isSecret") else str(header.get("value") or "")
                if header.get("isRequired") and not entry.headers[str(header["name"])]:
                    entry.notes.append(f"header {header['name']}: required; fill it in.")
        found.append(entry)
    if not found:
        raise _fail("This server.json lists no packages and no remotes.")
    return found


def _arguments(items: Any, entry: ImportEntry) -> list[str]:
    out: list[str] = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        value = str(item.get("value") or item.get("default") or "")
        if item.get("type") == "named":
            out += [str(item.get("name") or "")] + ([value] if value else [])
        elif value:
            out.append(value)
        else:
            hint = item.get("valueHint") or item.get("name") or "value"
            out.append(f"<{hint}>")
            entry.notes.append(f"Argument <{hint}> has no value: edit the arguments after import.")
    return out


def parse_config(text: str) -> tuple[str, list[ImportEntry]]:
    """The format of a config and the servers in it (names made Airlock-valid, tiers suggested), no conflicts
    checked yet. Raises ValidationFailed on `config`."""
    data = load_config(text)
    kind = detect_format(data)
    if kind == "server.json":
        entries = _registry_entries(data["server"] if isinstance(data.get("server"), dict) else data)
    else:
        block = data.get("mcpServers") if kind == "mcpServers" else (data.get("servers") or data["mcp"]["servers"])
        inputs = {str(i.get("id")): i for i in (data.get("inputs") or (data.get("mcp") or {}).get("inputs") or [])
                  if isinstance(i, dict)}
        entries = [_host_entry(str(name), spec, inputs) for name, spec in block.items()]
        if not entries:
            raise _fail("It lists no servers.")
    return kind, entries


def _free_name(base: str, taken: set[str]) -> str:
    for n in range(2, 1000):
        candidate = f"{base[:32 - len(str(n)) - 1]}-{n}"
        if candidate not in taken:
            return candidate
    return ""


def preview(*, org_id: Any, text: str) -> tuple[str, list[ImportEntry]]:
    """Reads a config and marks each entry whose name is taken, with a free name to use instead."""
    kind, entries = parse_config(text)
    taken = selectors.server_names(org_id=org_id)
    for entry in entries:
        if entry.name in taken:
            entry.conflict, entry.suggested_name = True, _free_name(entry.name, taken)
        if message := server_name_error(entry.name):
            entry.problem = entry.problem or message
        taken.add(entry.suggested_name or entry.name)
    return kind, entries


# --- registering ---------------------------------------------------------------------------------

def import_servers(*, actor: Actor, text: str, select: list[str] | None = None,
                   rename: dict[str, str] | None = None, tiers: dict[str, str] | None = None,
                   env: dict[str, dict[str, str]] | None = None) -> list[ImportResult]:
    """Registers the chosen entries of a config (by their preview `name`; all when `select` is None), each
    through `services.create_server` in its own transaction: one that fails leaves nothing behind and does not
    stop the others. `rename` and `tiers` override per entry; `env` fills in values (e.g. secrets the file
    only names). A conflicting entry is registered under its suggested name unless renamed."""
    actor.require("servers.manage")
    _, entries = preview(org_id=actor.org_id, text=text)
    rename, tiers, env = rename or {}, tiers or {}, env or {}
    results: list[ImportResult] = []
    for entry in entries:
        if select is not None and entry.name not in select:
            continue
        name = rename.get(entry.name) or entry.suggested_name or entry.name
        if entry.problem:
            results.append(ImportResult(entry=entry.name, name=name, ok=False, error=entry.problem))
            continue
        try:
            server = services.create_server(
                actor=actor, name=name, transport=entry.transport, trust_tier=tiers.get(entry.name) or entry.trust_tier,
                command=entry.command, args=entry.args, env={**entry.env, **(env.get(entry.name) or {})},
                cwd=entry.cwd, url=entry.url, headers=entry.headers, description=entry.description)
        except ValidationFailed as e:
            results.append(ImportResult(entry=entry.name, name=name, ok=False, error=e.message,
                                        errors=dict(e.errors or {})))
        except (Conflict, PermissionDenied) as e:
            results.append(ImportResult(entry=entry.name, name=name, ok=False, error=e.message))
        else:
            results.append(ImportResult(entry=entry.name, name=name, ok=True, server_id=str(server.id)))
    return results
