"""The real MCP gateways that bench/gateway.py measures Airlock's against, and every process the bench starts.

- `mcp-proxy` (0.13.0): a plain stdio-to-Streamable-HTTP proxy, no policy. It starts the downstream
  stdio server itself and keeps one session to it (`--port N -- command ...`, served at `/mcp`).
- IBM's ContextForge (`mcp-contextforge-gateway`): a gateway with a registry, virtual servers, auth and
  plugins. It does not start stdio servers: its own bridge (`python -m mcpgateway.translate --stdio`)
  exposes the downstream over Streamable HTTP, the gateway registers the bridge (`POST /gateways`), a
  virtual server offers the tool (`POST /servers`), and clients call `/servers/<id>/mcp` with a JWT.
  1.0.8 and later need Python 3.12; this machine's Python is 3.11 and its package registries serve no
  3.12 interpreter, so the bench runs 1.0.7 (the last release for 3.11).

Each peer is installed from PyPI into a venv of its own under var/bench/peers/ on first use (never into
.venv), pinned. ContextForge is configured as its documentation asks for a local run (SQLite, the admin
UI and API off, localhost upstreams allowed) with rate limiting off (on by default: 100 requests a
minute, then a lockout) and logging at its default (ERROR). The setup is in
docs/performance.md and ../shared/reference/benchmark-peers.md.

`Processes` owns every process the bench starts (Airlock's gateway, the floors, the peers, their
bridges): each in a process group of its own, so `stop_all` ends the downstream servers they started
too, also after a failure or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import venvs

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "var" / "bench" / "peers"
MCP_PROXY = "mcp-proxy==0.13.0"
CONTEXTFORGE = "mcp-contextforge-gateway==1.0.7.post20260921"
# The one downstream every side calls: the bench's own stdio server (`lookup(n)`, 2 KB of text).
DOWNSTREAM = (sys.executable, "-m", "bench.lookup_server")
TOOL_ARGUMENTS = {"n": 7}


@dataclass
class Endpoint:
    """Where the SDK client reaches one side, and the name that side gives the downstream's tool."""

    name: str
    url: str
    tool: str
    headers: dict[str, str] = field(default_factory=dict)
    version: str = ""
    roots: list[int] = field(default_factory=list)  # the processes the bench started for it
    database: str = ""  # its Postgres database, whose backends' CPU it costs too

    def cpu(self) -> dict[int, float]:
        """CPU seconds so far of its processes (the downstream server included) and Postgres backends."""
        return cpu_seconds(roots=self.roots, pids=_backends(self.database) if self.database else [])


# --- processes -------------------------------------------------------------------------------------------

class Processes:
    """Every process the bench starts, each the leader of a process group of its own, and their descendants
    (the MCP SDK starts a stdio server in a session of its own, outside its parent's group)."""

    def __init__(self) -> None:
        self._started: list[subprocess.Popen] = []

    def start(self, argv: list[str], *, log: Path, cwd: Path = ROOT, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            proc = subprocess.Popen(argv, cwd=cwd, env=env if env is not None else dict(os.environ), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._started.append(proc)
        return proc

    def stop_all(self) -> None:
        """SIGTERM to each leader (a graceful stop: Airlock's gateway drains its ledger), then SIGTERM and
        SIGKILL to whatever is left below them (the downstream servers)."""
        below = {pid: _started_at(pid) for pid in _descendants([p.pid for p in self._started])}
        for proc in self._started:
            below.pop(proc.pid, None)
        for proc in reversed(self._started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self._started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self._started:  # a leader that would not stop, and its group
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            left = {pid for pid, started in below.items() if started is not None and _started_at(pid) == started}
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = {pid for pid in left if _started_at(pid) == below[pid]}
        self._started.clear()


def _table() -> dict[int, tuple[int, float]]:
    """Every process on this machine: pid -> (parent pid, CPU seconds so far). Linux /proc; {} elsewhere."""
    ticks = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # after the name: [0] state, [1] parent pid, [11] utime, [12] stime
            table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return table


def _started_at(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), None if it is gone: a pid is reused once its process
    is reaped, and a number with another start time is someone else's (a Postgres backend, say)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])  # after the name: [0] state, [19] start time


def _descendants(roots: list[int], table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """`roots` and every live process below them."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_seconds(*, roots: list[int] = (), pids: list[int] = ()) -> dict[int, float]:
    """CPU time (user + system) so far of `roots` and everything below them, and of `pids`, by pid. What a
    side costs per call in CPU does not depend on what else runs on a shared machine as its calls/s do."""
    table = _table()
    return {pid: table[pid][1] for pid in {*_descendants(list(roots), table), *pids} if pid in table}


def process_name(pid: int) -> str:
    """A short name for a process: the module or program it runs (`uvicorn config.gateway:app`, `postgres`)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if argv and argv[0].startswith("postgres"):
        return "postgres"
    words = [w for w in argv[1:] if w and not w.startswith("-")] if "python" in Path(argv[0]).name else argv
    return " ".join(Path(w).name if "/" in w else w for w in words[:2])[:60] or Path(argv[0]).name


def _backends(database_url: str) -> list[int]:
    """The server pids of the Postgres backends connected to `database_url`'s database (a local server)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()").fetchall()
    return [row[0] for row in rows]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited early:\n{log.read_text(errors='replace')[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- installing ------------------------------------------------------------------------------------------

def ensure_venv(name: str, requirement: str) -> Path:
    """var/bench/peers/<name> with `requirement` installed from the registry (again when the pin changes).
    Returns its bin/ folder."""
    return venvs.ensure_venv(PEERS / name, requirement).parent


def _version(bin_dir: Path, distribution: str) -> str:
    done = subprocess.run([str(bin_dir / "python"), "-c",
                           f"import importlib.metadata as m; print(m.version({distribution!r}))"],
                          capture_output=True, text=True)
    return done.stdout.strip()


# --- the peers -------------------------------------------------------------------------------------------

def start_mcp_proxy(processes: Processes, logs: Path) -> Endpoint:
    bin_dir = ensure_venv("mcp-proxy", MCP_PROXY)
    port, log = free_port(), logs / "mcp-proxy.log"
    proc = processes.start([str(bin_dir / "mcp-proxy"), "--host", "127.0.0.1", "--port", str(port),
                            "--log-level", "WARNING", "--cwd", str(ROOT), "--", *DOWNSTREAM], log=log)
    wait_for_port(port, proc, log)
    return Endpoint("mcp-proxy", f"http://127.0.0.1:{port}/mcp", tool="lookup",
                    version=_version(bin_dir, "mcp-proxy"), roots=[proc.pid])


def contextforge_env(workdir: Path) -> dict[str, str]:
    """ContextForge's settings for the bench: fresh secrets, SQLite in `workdir`, UI and admin API off,
    localhost upstreams allowed (the bridge), rate limiting off. Airlock's own settings are left out."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRLOCK_", "DJANGO_")) and k not in ("DATABASE_URL", "REDIS_URL", "PYTHONPATH")}
    password = lambda: "Bench-" + secrets.token_urlsafe(12)  # noqa: E731 - it checks strength
    return {**env, "JWT_SECRET_KEY": secrets.token_urlsafe(32), "AUTH_ENCRYPTION_SECRET": secrets.token_urlsafe(32),
            "DATABASE_URL": f"sqlite:///{workdir}/contextforge.db", "PLATFORM_ADMIN_EMAIL": "admin@example.com",
            "PLATFORM_ADMIN_PASSWORD": password(), "BASIC_AUTH_PASSWORD": password(),
            "DEFAULT_USER_PASSWORD": password(), "MCPGATEWAY_UI_ENABLED": "false",
            "MCPGATEWAY_ADMIN_API_ENABLED": "false", "SSRF_ALLOW_LOCALHOST": "true", "RATE_LIMITING_ENABLED": "false"}


def start_contextforge(processes: Processes, logs: Path) -> Endpoint:
    import httpx2

    bin_dir = ensure_venv("contextforge", CONTEXTFORGE)
    workdir = logs / "contextforge"  # its cwd: it reads a .env there, and keeps its SQLite file there
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("contextforge.db*"):
        old.unlink()
    env = contextforge_env(workdir)
    bridge_port, port = free_port(), free_port()
    downstream = shlex.join(["env", "-C", str(ROOT), *DOWNSTREAM])  # the bridge runs it from the project
    bridge = processes.start([str(bin_dir / "python"), "-m", "mcpgateway.translate", "--stdio", downstream,
                              "--expose-streamable-http", "--host", "127.0.0.1", "--port", str(bridge_port),
                              "--logLevel", "warning"], log=logs / "contextforge-bridge.log", cwd=workdir, env=env)
    gateway_log = logs / "contextforge.log"
    gateway = processes.start([str(bin_dir / "mcpgateway"), "--host", "127.0.0.1", "--port", str(port)],
                              log=gateway_log, cwd=workdir, env=env)
    wait_for_port(bridge_port, bridge, logs / "contextforge-bridge.log")
    base = f"http://127.0.0.1:{port}"
    _wait_healthy(f"{base}/health", gateway, gateway_log)  # 10-20 s: it migrates a fresh SQLite
    token = subprocess.run([str(bin_dir / "python"), "-m", "mcpgateway.utils.create_jwt_token", "-u",
                            "admin@example.com", "--admin", "--exp", "600", "--secret", env["JWT_SECRET_KEY"]],
                           cwd=workdir, env=env, capture_output=True, text=True, check=True)
    headers = {"Authorization": f"Bearer {token.stdout.strip().splitlines()[-1]}"}
    with httpx2.Client(base_url=base, headers=headers, timeout=60) as rest:
        rest.post("/gateways", json={"name": "bench", "url": f"http://127.0.0.1:{bridge_port}/mcp",
                                     "transport": "STREAMABLEHTTP"}).raise_for_status()
        tools = rest.get("/tools").raise_for_status().json()
        tool = next(t for t in tools if t["name"].endswith("lookup"))
        server = rest.post("/servers", json={"server": {"name": "bench", "associated_tools": [tool["id"]]}})
        server_id = server.raise_for_status().json()["id"]
    return Endpoint("contextforge", f"{base}/servers/{server_id}/mcp", tool=tool["name"], headers=headers,
                    version=_version(bin_dir, "mcp-contextforge-gateway"), roots=[bridge.pid, gateway.pid])


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    import httpx2

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ContextForge exited early:\n{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"ContextForge not healthy after {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")
