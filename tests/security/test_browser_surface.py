"""The browser surface: a Content-Security-Policy on every page (no inline script, no eval, no
framing), no inline handlers left in the templates, CSRF on every cookie-authenticated write
(generated from the URL conf and the OpenAPI schema), and the real browser running the pages
under that policy without a single violation (the root conftest fails any browser test on one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import Page, expect

from apps.web.middleware import PROBE_PATHS, PROBE_POLICY
from tests.factories import PASSWORD
from tests.security import routes

ROOT = Path(__file__).resolve().parents[2]
PAGES = routes.pages()
OPERATIONS = routes.operations()
UNSAFE = ("post", "put", "patch", "delete")


def _directives(header: str) -> dict[str, str]:
    return {part.strip().split(" ", 1)[0]: part.strip().partition(" ")[2] for part in header.split(";")}


@pytest.fixture
def own_world(db):
    """An organisation full of objects, and its owner signed in with CSRF checks on."""
    victim = routes.victim_world()
    client = Client(enforce_csrf_checks=True)
    client.force_login(victim.owner.user)
    return victim, client


def test_every_page_sends_the_policy(own_world):
    victim, client = own_world
    seen = 0
    for page in PAGES:
        if not set(page.params) <= set(victim.ids):
            continue  # the tenancy and CSRF tests fail for it, saying which factory to add
        response = client.get(page.url(victim.ids))
        if response.status_code == 405:
            continue
        if "/" + page.route in PROBE_PATHS:  # a machine's JSON or text: a policy that allows nothing at all
            assert response["Content-Security-Policy"] == PROBE_POLICY and response["X-Frame-Options"] == "DENY"
            assert response["X-Content-Type-Options"] == "nosniff"
            continue
        csp = _directives(response["Content-Security-Policy"])
        assert csp["script-src"] == "'self'", page.route
        assert csp["script-src-attr"] == "'none'"
        assert "unsafe-eval" not in response["Content-Security-Policy"]
        assert "unsafe-inline" not in csp["script-src"] + csp["style-src"] + csp["default-src"]
        assert csp["frame-ancestors"] == "'none'" and response["X-Frame-Options"] == "DENY", page.route
        assert csp["object-src"] == "'none'" and csp["form-action"] == "'self'" and csp["base-uri"] == "'self'"
        assert csp["connect-src"] == "'self' ws://testserver wss://testserver"
        assert response["X-Content-Type-Options"] == "nosniff"
        seen += 1
    assert seen >= 30


def test_api_answers_and_docs_send_it_too(client, db):
    for path in ("/api/v1/openapi.json", "/api/v1/docs", "/api/v1/me", "/healthz", "/login/"):
        response = client.get(path)
        assert "frame-ancestors 'none'" in response["Content-Security-Policy"], path


def test_over_https_only_secure_websockets(client, db):  # sign-in lists the SSO providers
    response = client.get("/login/", secure=True)
    assert "connect-src 'self' wss://testserver;" in response["Content-Security-Policy"]


def test_templates_hold_no_inline_script_or_handler():
    offenders = []
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
    handler = re.compile(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", re.I)
    for template in sorted((ROOT / "templates").rglob("*.html")):
        text = template.read_text()
        for pattern in (inline_script, handler):
            offenders += [f"{template.relative_to(ROOT)}: {m.group(0).strip()}" for m in pattern.finditer(text)]
        if "javascript:" in text:
            offenders.append(f"{template.relative_to(ROOT)}: javascript: URL")
    assert offenders == [], "move this behaviour into static/js/ (the CSP blocks it): " + "; ".join(offenders)


def test_htmx_may_not_eval():
    base = (ROOT / "templates" / "base.html").read_text()
    assert '"allowEval": false' in base and '"allowScriptTags": false' in base


# --- CSRF -------------------------------------------------------------------------------------

# Endpoints that OAuth clients (MCP hosts) call without cookies: a session cookie is not what authorizes
# them (the code and its PKCE verifier, the token itself, a registration token), so they take no CSRF token.
# A cross-site POST with the person's cookies must still change nothing of theirs.
OAUTH_CLIENT_ENDPOINTS = {"o/token/", "o/revoke_token/", "o/register/", "o/register/<str:client_id>/",
                          # Slack's interactions: no session; refused unless signed with the connection's secret
                          "integrations/slack/<uuid:connection_id>/interactions/"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.route)
def test_every_page_post_without_a_csrf_token_is_403(page, own_world):
    victim, client = own_world
    routes.require_ids(victim, page.params, page.route, pytest.fail)
    before = routes.snapshot(victim.org)
    response = client.post(page.url(victim.ids), {"name": "csrf", "role": "viewer"})
    if page.route in OAUTH_CLIENT_ENDPOINTS:
        assert 400 <= response.status_code < 500, f"POST /{page.route} with cookies only: {response.status_code}"
    else:
        assert response.status_code == 403, f"POST /{page.route} without a CSRF token: {response.status_code}"
    assert routes.snapshot(victim.org) == before


def test_a_post_with_the_token_gets_through(own_world):
    """The 403s above are CSRF's doing: the same request with its token is served."""
    victim, client = own_world
    client.get("/settings/tokens/")
    token = client.cookies[settings.CSRF_COOKIE_NAME].value
    response = client.post(f"/crews/{victim.ids['crew_id']}/enabled/", {"csrfmiddlewaretoken": token})
    assert response.status_code in (200, 302)


@pytest.mark.parametrize("op", [o for o in OPERATIONS if o.method in UNSAFE], ids=lambda o: f"{o.method} {o.path}")
def test_every_api_write_with_a_session_cookie_needs_the_csrf_token(op, own_world):
    victim, client = own_world
    routes.require_ids(victim, op.params, op.path, pytest.fail)
    before = routes.snapshot(victim.org)
    response = getattr(client, op.method)(op.url(victim.ids), data={}, content_type="application/json")
    assert response.status_code == 403, f"{op.method.upper()} {op.path}: {response.status_code}"
    assert "CSRF" in response.json()["detail"]
    assert routes.snapshot(victim.org) == before


def test_an_api_write_with_session_and_csrf_token_gets_through(own_world):
    victim, client = own_world
    client.get("/settings/tokens/")
    token = client.cookies[settings.CSRF_COOKIE_NAME].value
    response = client.patch(f"/api/v1/crews/{victim.ids['crew_id']}", data={"description": "ok"},
                            content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200, response.content


# --- in the real browser ----------------------------------------------------------------------

def _sign_in(page: Page, live_url: str, email: str) -> None:
    page.goto(f"{live_url}/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_page_runs_under_the_policy_in_chromium(page: Page, live_url):
    """Each page with its scripts, htmx and websocket: the `page` fixture fails on any violation."""
    victim = routes.victim_world()
    _sign_in(page, live_url, victim.owner.user.email)
    probe = Client()
    probe.force_login(victim.owner.user)
    visited = 0
    for item in PAGES:
        if item.name in ("logout", "healthz") or not set(item.params) <= set(victim.ids):
            continue
        url = item.url(victim.ids)
        answer = probe.get(url)
        if answer.status_code != 200 or answer.streaming or b"<!doctype html" not in answer.content[:200].lower():
            continue  # POST-only routes, htmx fragments, downloads, reset links with made-up tokens
        response = page.goto(f"{live_url}{url}")
        assert response.status < 500, item.route
        visited += 1
    assert visited >= 25
    page.goto(f"{live_url}/api/v1/docs")
    expect(page.get_by_text("Airlock API").first).to_be_visible()
    page.goto(f"{live_url}/")
    theme = page.evaluate("document.documentElement.getAttribute('data-bs-theme')")
    page.locator("#theme-toggle").click()
    assert page.evaluate("document.documentElement.getAttribute('data-bs-theme')") != theme
    expect(page.locator("#inbox-badge")).to_be_visible()  # arrived over the websocket (connect-src)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_policy_really_blocks_inline_script_and_framing(browser, live_url):
    victim = routes.victim_world()
    context = browser.new_context()
    page = context.new_page()
    messages: list[str] = []
    page.on("console", lambda msg: messages.append(msg.text))
    _sign_in(page, live_url, victim.owner.user.email)
    page.goto(f"{live_url}/inbox/")
    page.evaluate("""() => { const s = document.createElement('script');
                            s.textContent = 'window.__pwned = 1'; document.body.appendChild(s); }""")
    assert page.evaluate("window.__pwned") is None
    page.evaluate("""() => { const d = document.createElement('div');
                            d.setAttribute('hx-on:click', 'window.__pwned = 2'); d.id = 'evil';
                            document.body.appendChild(d); htmx.process(d); }""")
    page.locator("#evil").dispatch_event("click")
    assert page.evaluate("window.__pwned") is None
    assert any("Content Security Policy" in m for m in messages), messages

    # another origin (a different port is another origin) frames the inbox: refused
    frame_page = context.new_page()
    frame_page.goto("about:blank")
    frame_page.set_content(f'<iframe id="f" src="{live_url}/inbox/"></iframe>')
    frame_page.wait_for_timeout(1500)
    frame = frame_page.frame_locator("#f")
    assert frame.get_by_text("Inbox").count() == 0
    context.close()
