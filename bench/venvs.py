"""The peers' own environments under var/bench/: made once, installed again only when what they pin changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure_venv(venv: Path, requirements: Path | str, what: str = "") -> Path:
    """`venv` with `requirements` installed from the registry: a requirements file, or one requirement such as
    "mcp-proxy==0.8.2". Returns the venv's python."""
    python = venv / "bin" / "python"
    wanted = requirements.read_text() if isinstance(requirements, Path) else requirements
    marker = venv / ".installed"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"setting up {venv.relative_to(ROOT)}{f' ({what})' if what else ''} ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    install = ["-r", str(requirements)] if isinstance(requirements, Path) else [requirements]
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *install], check=True)
    marker.write_text(wanted)
    return python
