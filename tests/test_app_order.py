"""The app order stated in docs/architecture.md is the code's: no module-top import of a later app, and api and
web import neither each other. A function may import a later app only on a line that says why (`# later app:`
and the reason, which is the cycle a module-top import would make): the exception is visible and explained."""

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


LATER_APP = "# later app:"


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(app, line, explained) of every `apps.<app>` import in a file; `explained`: a function-local import whose
    line carries a `# later app:` reason."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    local = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
             for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apps."):
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.startswith("apps.")]
        text = " ".join(lines[node.lineno - 1:getattr(node, "end_lineno", node.lineno)]) if names else ""
        explained = id(node) in local and LATER_APP in text
        found += [(name.split(".")[1], node.lineno, explained) for name in names]
    return found


def test_every_app_is_in_the_stated_order():
    apps = {p.name for p in (ROOT / "apps").iterdir() if (p / "apps.py").exists()}
    assert apps == set(stated_order())


def test_no_app_imports_one_after_it_or_its_peer():
    ranks = stated_order()
    wrong = []
    for path in sorted((ROOT / "apps").rglob("*.py")):
        app = path.relative_to(ROOT / "apps").parts[0]
        for other, line, explained in imports(path):
            if other != app and ranks[other] >= ranks[app] and not (explained and ranks[other] > ranks[app]):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports apps.{other}")
    assert not wrong, "imports against docs/architecture.md's app order:\n" + "\n".join(wrong)
