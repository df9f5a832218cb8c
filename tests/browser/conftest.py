"""Browser tests drive a real headless Chromium with Playwright's sync API.

Playwright never downloads a browser here: the tests use the Chromium the machine has
(CHROMIUM_PATH, or Debian's /usr/bin/chromium), and are skipped with a notice when
there is none.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# How long a browser test waits for anything (a hang guard; see chromium_page).
BROWSER_WAIT_MS = 60_000

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NO_CHROMIUM = "no Chromium found (install Debian's chromium or set CHROMIUM_PATH)"


def chromium_path() -> str | None:
    """The Chromium to drive: $CHROMIUM_PATH, else the first system one found."""
    configured = os.environ.get("CHROMIUM_PATH")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found


def pytest_collection_modifyitems(config, items):
    if chromium_path() is not None:
        return
    skip = pytest.mark.skip(reason=NO_CHROMIUM)
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(skip)


@contextmanager
def chromium_page() -> Iterator:
    """A fresh page in a headless Chromium, closed afterwards.

    Opened and closed inside the test rather than in a fixture: Playwright's sync API
    runs an event loop in this thread while it is open, and Django refuses ORM calls
    from a thread with a running loop, so tests touch the database before and after.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            # A hang guard, not a speed check: a loaded 2-core CI machine can take many
            # seconds for what a quiet one does at once.
            page.set_default_timeout(BROWSER_WAIT_MS)
            yield page
        finally:
            browser.close()


def wait_until(page, expression: str, timeout: float | None = None) -> None:
    """Waits until the JavaScript ``expression`` is true in ``page`` (false while it throws).

    Playwright's ``wait_for_function`` builds its predicate with ``eval`` inside the page,
    which the platform's Content-Security-Policy refuses (no 'unsafe-eval'), so the tests
    poll with ``page.evaluate``, which goes through the DevTools protocol instead.
    """
    from playwright.sync_api import Error

    timeout = BROWSER_WAIT_MS if timeout is None else timeout
    check = f"(() => {{ try {{ return Boolean({expression}); }} catch (error) {{ return false; }} }})()"
    deadline = time.monotonic() + timeout / 1000
    while True:
        try:
            if page.evaluate(check):
                return
        except Error:
            pass  # a navigation replaced the document mid-check: ask again
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout / 1000:g} s: {expression}")
        page.wait_for_timeout(100)


@pytest.fixture
def artifacts_dir() -> Path:
    """Where screenshots go (gitignored), for a person to look at after a run."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
