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
