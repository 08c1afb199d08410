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
    "/", "/servers/", "/servers/{server_id}/", "/servers/catalog/", "/tools/{tool_id}/", "/resources/{resource_id}/",
    "/agents/", "/agents/{agent_id}/", "/agents/{agent_id}/edit/", "/agents/connections/", "/crews/",
    "/crews/{crew_id}/", "/crews/{crew_id}/edit/", "/runs/", "/runs/{run_id}/", "/inbox/", "/inbox/standing/",
    "/costs/", "/settings/members/", "/settings/tokens/", "/settings/gateway/", "/settings/system/",
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


def test_a_skip_link_leads_past_the_navigation(page: Page, live_url, world):
    sign_in(page, live_url, world.owner.user.email)
    page.goto(f"{live_url}/inbox/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    page.keyboard.press("Enter")
    expect(page.locator("#main-content")).to_be_focused()


def _sideways(page: Page) -> list[str]:
    """The elements wider than the screen, when the page scrolls sideways."""
    return page.evaluate("""() => {
      const width = document.documentElement.clientWidth;
      if (document.documentElement.scrollWidth <= width) return [];
      return [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > width + 1)
        .slice(0, 8).map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.'));
    }""")


def test_on_a_phone_nothing_scrolls_sideways_and_the_inbox_shows_its_first_item(browser, live_url, world):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        sign_in(page, live_url, world.owner.user.email)
        for path in ("/runs/{run_id}/", "/inbox/", "/agents/{agent_id}/", "/costs/", "/"):
            page.goto(live_url + path.format(**world.ids))
            assert _sideways(page) == [], path
        page.goto(f"{live_url}/inbox/")
        expect(page.get_by_text("Filters", exact=True)).to_be_visible()  # folded on a phone, one tap away
        expect(page.get_by_label("Risk")).to_be_hidden()
        first = page.locator("[data-testid=unknown-call], [data-testid=approval]").first
        box = first.bounding_box()
        assert box is not None and box["y"] < 844 - 120, f"the first item starts at {box and box['y']} px"
        page.get_by_text("Filters", exact=True).click()
        expect(page.get_by_label("Risk")).to_be_visible()
    finally:
        context.close()


def test_the_sidebar_reaches_the_bottom_of_a_long_page(page: Page, live_url, world):
    sign_in(page, live_url, world.owner.user.email)
    page.set_viewport_size({"width": 1280, "height": 700})
    page.goto(f"{live_url}/costs/")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    bottom = page.evaluate("document.querySelector('aside.navbar-vertical').getBoundingClientRect().bottom")
    assert bottom >= 700 - 1


TRUNCATED_SELECTS = """() => {
  const canvas = document.createElement('canvas').getContext('2d');
  return [...document.querySelectorAll('main select')].filter(s => s.offsetParent !== null).filter(s => {
    const style = getComputedStyle(s);
    canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const room = s.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const shown = s.selectedIndex >= 0 ? canvas.measureText(s.options[s.selectedIndex].text).width : 0;
    return shown > room + 1;
  }).map(s => `${s.id || s.name}: ${s.clientWidth}px`);
}"""


@pytest.mark.parametrize("width", [1280, 800])
def test_dropdowns_show_the_whole_choice_they_show(page: Page, live_url, world, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_url, world.owner.user.email)
    cut = {}
    for path in ("/inbox/", "/agents/{agent_id}/edit/", "/servers/", "/costs/", "/runs/", "/audit/"):
        page.goto(live_url + path.format(**world.ids))
        cut[path] = page.evaluate(TRUNCATED_SELECTS)
    assert {p: c for p, c in cut.items() if c} == {}


@pytest.mark.parametrize(("form_id", "field", "button", "error"), [
    ("budget-form", "Amount (USD)", "Save budget", "budget-error"),
    ("price-form", "Input $/M tokens", "Save price", "price-error"),  # the last form of the page
])
def test_a_failed_budget_or_price_save_shows_its_error_in_view_and_a_reload_does_not_break(
        page: Page, live_url, world, form_id, field, button, error):
    sign_in(page, live_url, world.owner.user.email)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_url}/costs/")
    form = page.locator(f"#{form_id}")
    if form_id == "price-form":
        form.get_by_label("Model", exact=True).fill("some-model")
    form.get_by_label(field, exact=True).fill("lots")
    form.get_by_role("button", name=button).click()
    alert = page.get_by_test_id(error)
    expect(alert).to_be_in_viewport()
    expect(form.get_by_label(field, exact=True)).to_be_focused()
    expect(form.get_by_label(field, exact=True)).to_be_in_viewport()
    page.reload()  # the address is the form's target: a GET goes back to the costs page, not a blank 405
    expect(page.get_by_role("heading", name="Costs", exact=True)).to_be_visible()
