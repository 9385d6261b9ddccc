"""A real browser for the UI's tests: Debian's Chromium (``/usr/bin/chromium``), driven by
Playwright, which downloads no browser of its own.

Screenshots go to ``test-artifacts/ui/`` at the repository's top (``PRIMUS_TEST_ARTIFACTS``
elsewhere), kept after the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.support.primus import REPO

CHROMIUM = Path(os.environ.get("PRIMUS_TEST_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("PRIMUS_TEST_ARTIFACTS", REPO / "test-artifacts")) / "ui"
# Chromium on a machine with no way out: no background connections, no sandbox as root.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test module; a missing Chromium fails the tests using it.

    Not per session: Playwright's synchronous API keeps an event loop running in the main
    thread while it is open, and the asyncio tests that come after would find it there."""
    assert CHROMIUM.exists(), (f"{CHROMIUM} is missing: the UI's tests need Debian's chromium "
                               f"(scripts/bootstrap --test installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies) for one test; certificates of the test CA are
    accepted."""
    made = browser.new_context(ignore_https_errors=True, viewport={"width": 1366, "height": 860})
    made.set_default_timeout(15_000)
    yield made
    made.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    """A tab of :func:`context`."""
    return context.new_page()


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as ``<artifacts>/ui/<name>.png``; return the file."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
