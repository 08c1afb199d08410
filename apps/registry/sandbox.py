"""The sandbox for `third_party` stdio servers: bubblewrap, built as an argv (never a shell string).

Inside: no network (all namespaces unshared), read-only /usr (+ the lib symlinks) and the
server's own runtime dirs, a private work dir and a private /tmp, an environment holding only
the server's own variables, resource limits (sandbox_launch.py). When bubblewrap cannot run
here, `SandboxUnavailable` is raised and the server is not started: never unsandboxed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.conf import settings

BWRAP = "/usr/bin/bwrap"
LAUNCHER = str(Path(__file__).with_name("sandbox_launch.py"))
WORK = "/airlock-work"  # not /work: runtime dirs on the host may live under /work
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_TMP = "/tmp"  # noqa: S108 (a private tmpfs inside the sandbox)


class SandboxUnavailable(Exception):
    """Bubblewrap is missing or not usable on this machine."""


@dataclass(frozen=True)
class Limits:
    memory: int = 512 * 1024 * 1024
    cpu: int = 600  # CPU seconds over the process's life
    pids: int = 64
    nofile: int = 256
    fsize: int = 64 * 1024 * 1024


BASE_BINDS = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
              "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin"]


@cache
def _probe() -> str:
    """'' when bubblewrap works here, else why not (cached per process)."""
    if not os.access(BWRAP, os.X_OK):
        return f"bubblewrap is not installed ({BWRAP} missing; Debian package 'bubblewrap')."
    argv = [BWRAP, "--unshare-all", "--die-with-parent", *BASE_BINDS, "--proc", "/proc", "--dev", "/dev",
            "--", "/usr/bin/true"]
    try:
        done = subprocess.run(argv, env={}, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {done.stderr.decode(errors='replace').strip()[:200]}"
    return ""


def require_sandbox() -> None:
    reason = _probe()
    if reason:
        raise SandboxUnavailable(f"Refusing to start a third-party server without a sandbox: {reason}")


def work_dir(server_id: str) -> Path:
    path = Path(settings.VAR_DIR) / "sandbox" / str(server_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _runtime_root(path: Path) -> Path:
    """The directory a program needs with it: its venv, its node package tree, else its folder."""
    for parent in [path, *path.parents]:
        if (parent / "pyvenv.cfg").exists() or parent.name == "node_modules":
            return parent.parent if parent.name == "node_modules" else parent
    return path.parent


def _venv_home(root: Path) -> Path | None:
    """The Python installation a venv runs on (its `home`), when that lives outside /usr."""
    cfg = root / "pyvenv.cfg"
    if not cfg.exists():
        return None
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).resolve().parent
    return None


def runtime_dirs(command: str, args: list[str], cwd: str = "") -> list[str]:
    """Host dirs to bind read-only: those holding the command and any file path among its args
    (with a venv: also the Python it runs on)."""
    found: set[Path] = set()
    for item in [command, *args]:
        candidate = Path(item) if os.path.isabs(item) else Path(cwd or os.getcwd()) / item
        if os.sep in item and candidate.exists():
            for p in {candidate.absolute(), candidate.resolve()}:
                root = _runtime_root(p)
                found.update(r for r in (root, _venv_home(root)) if r is not None)
    return sorted(str(p) for p in found if p != Path("/") and not str(p).startswith("/usr"))


def resolve_command(command: str, cwd: str = "") -> str:
    if os.sep in command:
        return command if os.path.isabs(command) else str(Path(cwd or os.getcwd()) / command)
    found = shutil.which(command, path=SANDBOX_PATH)
    if found is None:
        raise FileNotFoundError(f"Command not found in the sandbox's PATH ({SANDBOX_PATH}): {command}")
    return found


def sandbox_argv(*, name: str, command: str, args: list[str], env: dict[str, str], cwd: str = "",
                 limits: Limits | None = None, work: Path | None = None) -> list[str]:
    """The argv that starts `command args` inside the sandbox. Start it with env={}."""
    require_sandbox()
    limits = limits or Limits()
    work = work or work_dir(name)
    program = resolve_command(command, cwd)
    binds: list[str] = []
    for path in runtime_dirs(program, args, cwd):
        binds += ["--ro-bind", path, path]
    variables: list[str] = []
    for key, value in {"HOME": WORK, "PATH": SANDBOX_PATH, "TMPDIR": SANDBOX_TMP, **env}.items():
        variables += ["--setenv", key, value]
    # The private /tmp goes first: runtime dirs bound after it stay visible even when the
    # installation itself lives under /tmp (CI clones there).
    bwrap = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session", *BASE_BINDS,
             "--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP, *binds,
             "--bind", str(work), WORK, "--chdir", WORK, *variables, "--", program, *args]
    config = json.dumps({"name": name, **limits.__dict__})
    return [sys.executable, "-I", "-S", LAUNCHER, config, "--", *bwrap]
