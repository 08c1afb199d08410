"""The app order stated in docs/architecture.md is the code's: no app imports an app after it (at module
top or inside a function), and api and web import neither each other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def stated_order() -> dict[str, int]:
    """app -> rank, from the line after the `app-order` marker (`a -> b -> {c, d} -> e`)."""
    lines = (ROOT / "docs" / "architecture.md").read_text().splitlines()
    line = lines[next(i for i, text in enumerate(lines) if "app-order:" in text) + 1]
    ranks = {}
    for rank, step in enumerate(line.strip("` ").split("->")):
        for app in re.findall(r"\w+", step):
            ranks[app] = rank
    return ranks


def imports(path: Path) -> list[tuple[str, int]]:
    """(app, line) of every `apps.<app>` import in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apps."):
            found.append((node.module.split(".")[1], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name.split(".")[1], node.lineno) for alias in node.names
                      if alias.name.startswith("apps.")]
    return found


def test_every_app_is_in_the_stated_order():
    apps = {p.name for p in (ROOT / "apps").iterdir() if (p / "apps.py").exists()}
    assert apps == set(stated_order())


def test_no_app_imports_one_after_it_or_its_peer():
    ranks = stated_order()
    wrong = []
    for path in sorted((ROOT / "apps").rglob("*.py")):
        app = path.relative_to(ROOT / "apps").parts[0]
        for other, line in imports(path):
            if other != app and ranks[other] >= ranks[app]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports apps.{other}")
    assert not wrong, "imports against docs/architecture.md's app order:\n" + "\n".join(wrong)
