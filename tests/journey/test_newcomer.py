"""A newcomer's whole journey, in a real browser, on a clean checkout running the way README's first
command (`scripts/run`) runs it: the embedded defaults (SQLite, the filesystem broker, live updates
through the database), web + worker + beat + gateway from `manage.py runall`.

`scripts/run` creates `.venv`, migrates, seeds the demo and starts `runall`; this test does the same
steps (`manage.py migrate`, `manage.py seed_demo`, `manage.py runall --port P --gateway-port Q`) on a
`git archive HEAD` of the repository, with the current venv's python instead of re-creating a venv.

As the demo owner (the login `seed_demo` prints), the newcomer registers the demo server from the
catalog under a new name, defines an agent whose refund is held for approval, builds a crew, starts
a run, approves the held refund in the inbox, watches the run finish live on its page (opened in
another tab before approving: no reload), and finds its cost on the costs page.

Each step's screenshot is saved under the test's tmp_path. With AIRLOCK_UPDATE_SCREENSHOTS=1 the
dashboard, inbox, run and costs screenshots are also copied to docs/img/ (README shows them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_accessibility import serious_violations
from tests.processes import free_port, wait_for_port

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent.parent
README_SHOTS = {"dashboard", "inbox", "run", "costs"}
SERVER = "desk2"
SCRIPT = [
    {"call": [{"tool": f"{SERVER}.get_order_status", "args": {"order_id": "A-1003"}}]},
    {"call": [{"tool": f"{SERVER}.refund_order",
               "args": {"order_id": "A-1003", "amount_cents": 1500, "request_id": "journey-A-1003"}}]},
    {"say": "Refunded 1500 cents on A-1003.\nSTATUS: done\nREASON: the refund was approved and made"},
]


def clean_checkout(target: Path) -> Path:
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def embedded_env() -> dict[str, str]:
    """No DATABASE_URL / REDIS_URL and no test run id: exactly a newcomer's shell."""
    keep = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"}
    return {k: v for k, v in os.environ.items() if k in keep} | {"PYTHONUNBUFFERED": "1", "DEBUG": "1"}


def manage(checkout: Path, *args: str) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=checkout, env=embedded_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


class Shots:
    """A screenshot of each step, and axe-core's serious and critical WCAG 2.1 AA findings on that page."""

    def __init__(self, page: Page, folder: Path) -> None:
        self.page, self.folder, self.count = page, folder, 0
        self.violations: dict[str, list[str]] = {}
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str, page: Page | None = None) -> None:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{name}.png"
        (page or self.page).screenshot(path=str(path), full_page=False)
        self.violations[name] = serious_violations(page or self.page)
        if name in README_SHOTS and os.environ.get("AIRLOCK_UPDATE_SCREENSHOTS") == "1":
            shutil.copyfile(path, ROOT / "docs" / "img" / f"{name}.png")


def test_a_newcomer_goes_from_the_demo_login_to_an_approved_costed_run(page: Page, tmp_path):
    (tmp_path / "checkout").mkdir()
    checkout = clean_checkout(tmp_path / "checkout")
    seeded = manage(checkout, "migrate", "--noinput") and manage(checkout, "seed_demo")
    password = re.search(r"owner@demo\.example\s+(\S+)", seeded).group(1)

    port, gateway_port = free_port(), free_port()
    log = tmp_path / "runall.log"
    with log.open("w") as out:
        launcher = subprocess.Popen(
            [sys.executable, "manage.py", "runall", "--port", str(port), "--gateway-port", str(gateway_port)],
            cwd=checkout, env=embedded_env(), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    page.set_viewport_size({"width": 1280, "height": 860})
    page.set_default_timeout(60_000)  # the embedded mode on a busy 2-core machine: slow, not wrong
    page.set_default_navigation_timeout(120_000)
    shot = Shots(page, tmp_path / "screenshots")
    try:
        wait_for_port(port, launcher, log, timeout=90)

        # 1. Sign in with the printed demo login.
        page.goto(f"{base}/login/")
        page.get_by_label("Email").fill("owner@demo.example")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
        expect(page.get_by_test_id("dashboard-live")).to_have_attribute("data-live-state", "open")
        shot("signed-in")

        # 2. Register the demo server from the catalog, under a new name.
        page.get_by_role("link", name="Servers").first.click()
        page.get_by_role("link", name="Add from catalog").click()
        page.locator("[data-catalog=orders]").get_by_role("link", name="Adjust first").click()
        page.get_by_label("Name").fill(SERVER)
        shot("catalog-entry")
        page.get_by_role("button", name="Register and sync").click()
        expect(page.get_by_role("heading", name=SERVER)).to_be_visible()
        tools = page.get_by_role("table").filter(has_text="Findings")
        expect(tools).to_contain_text(f"{SERVER}.refund_order", timeout=60_000)
        expect(page.locator("#server-status")).to_contain_text("OK")
        shot("server")

        # 3. An agent on the scripted model whose refund is held for a person.
        page.get_by_role("link", name="Agents").first.click()
        page.get_by_role("link", name="New agent").first.click()
        page.get_by_label("Name", exact=True).fill("Journey refunds")
        page.get_by_label("Role", exact=True).fill("refund clerk")
        page.get_by_label("LLM connection").select_option(label="Scripted (demo) (Scripted (built in, deterministic))")
        page.get_by_label("Script (scripted provider only)").fill(json.dumps(SCRIPT))
        page.get_by_label("Search tools").fill(SERVER)
        page.get_by_role("button", name=f"Add {SERVER}.get_order_status").click()
        page.get_by_label(f"Policy for {SERVER}.get_order_status").select_option("auto")
        page.get_by_role("button", name=f"Add {SERVER}.refund_order").click()
        page.get_by_label(f"Policy for {SERVER}.refund_order").select_option("approve")
        shot("agent-form")
        page.get_by_role("button", name="Create agent").click()
        expect(page.get_by_role("heading", name="Journey refunds")).to_be_visible()
        expect(page.get_by_test_id("effective-permissions")).to_contain_text(f"{SERVER}.refund_order")
        shot("agent")

        # 4. A crew with that agent.
        page.get_by_role("link", name="Crews").first.click()
        page.get_by_role("link", name="New crew").first.click()
        page.get_by_label("Name", exact=True).fill("Journey desk")
        task = page.locator(".task-row").nth(0)
        task.get_by_label("Task name").fill("refund")
        task.get_by_label("Agent").select_option(label="Journey refunds")
        task.get_by_label("Task description").fill("Refund 1500 cents on order A-1003.")
        page.get_by_role("button", name="Create crew").click()
        expect(page.get_by_role("heading", name="Journey desk")).to_be_visible()
        shot("crew")

        # 5. Start a run: it reads, then waits for a person on the refund.
        page.get_by_role("link", name=re.compile(r"\bRun$")).click()  # (the icon's glyph is in the name)
        page.get_by_role("button", name="Start run").click()
        expect(page.get_by_test_id("run-live")).to_have_attribute("data-live-state", "open")
        expect(page.locator("#run-header [data-status]")).to_have_text("waiting", timeout=90_000)
        run_url = page.url
        shot("run-waiting")

        # The run page stays open in another tab: it must finish there without a reload.
        watcher = page.context.new_page()
        watcher.set_viewport_size({"width": 1280, "height": 860})
        watcher.set_default_timeout(60_000)
        watcher.goto(run_url)
        expect(watcher.get_by_test_id("run-live")).to_have_attribute("data-live-state", "open")

        # 6. The dashboard counts the held call (beside the one seed_demo's own run left waiting);
        #    the inbox shows it; approve it.
        page.get_by_role("link", name="Dashboard").first.click()
        expect(page.get_by_test_id("tile-approvals-count")).to_have_text("2")
        expect(page.get_by_test_id("tile-runs-count")).to_have_text("2")
        expect(page.get_by_test_id("tile-approvals-oldest")).to_contain_text("Oldest waiting")
        shot("dashboard")
        page.get_by_test_id("tile-approvals").click()
        item = page.get_by_test_id("approval").filter(has_text=f"{SERVER}.refund_order")
        expect(item).to_be_visible()
        expect(item.get_by_test_id("arguments")).to_contain_text('"amount_cents": 1500')
        shot("inbox")
        item.get_by_role("button", name="Approve").click()
        expect(item.get_by_test_id("decided")).to_be_visible()

        # 7. The run finishes live on its page.
        expect(watcher.locator("#run-header [data-status]")).to_have_text("succeeded", timeout=90_000)
        expect(watcher.locator("#run-tree [data-state=succeeded]").filter(
            has_text=f"{SERVER}.refund_order")).to_be_visible()
        shot("run", watcher)
        watcher.close()

        # 8. Its cost on the costs page: the demo prices the scripted model with an example price, marked as
        #    such, so the charts show spend on day one (not $0, not "unknown"); the crew ran once.
        page.get_by_role("link", name="Costs").first.click()
        expect(page.get_by_test_id("example-prices")).to_contain_text("not a real cost")
        row = page.get_by_test_id("by-crew").locator("tr").filter(has_text="Journey desk")
        expect(row.locator("td").nth(1)).to_have_text("1")
        expect(row.locator("td").nth(3)).to_have_text(re.compile(r"^\$0\.(?!0000)\d{4}$"))
        agent_row = page.get_by_test_id("by-agent").locator("tr").filter(has_text="Journey refunds")
        expect(agent_row.locator("td").nth(3)).to_have_text(re.compile(r"^\$0\.(?!0000)\d{4}$"))
        shot("costs")
        assert {name: found for name, found in shot.violations.items() if found} == {}
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=60)
