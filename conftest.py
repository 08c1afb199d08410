"""Root fixtures: personas, Playwright on Debian's chromium, and real server processes."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    # Debian's chromium; never `playwright install` (it downloads browsers, offline it fails).
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": ["--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"],
    }


@pytest.fixture
def page(page):
    """Every browser test also checks the Content-Security-Policy: a violation fails the test."""
    violations: list[str] = []
    page.add_init_script("document.addEventListener('securitypolicyviolation', e => console.error("
                         "'CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline')))")
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text or msg.text.startswith("CSP violation") else None)
    yield page
    assert not violations, f"Content-Security-Policy violations: {violations}"
