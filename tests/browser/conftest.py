"""Browser tests: Playwright's sync API driving Debian's Chromium against a real server
(``tests.live``) on the test database. Skipped when Chromium is not installed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.factories import agent_with_token
from tests.live import LiveServer, live_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 10_000  # every wait in these tests is bounded by this
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API runs an event loop in this thread, and Django refuses ORM calls
    while one runs. Here only (this module's tests and their database teardown), allow them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def server(transactional_db: None, browser: Browser) -> Iterator[LiveServer]:
    with live_server() as running:
        yield running


@dataclass
class Watch:
    """What must never happen on a page: a dialog, a CSP violation, a script error."""

    dialogs: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        def on_dialog(dialog: object) -> None:
            self.dialogs.append(dialog.message)  # type: ignore[attr-defined]
            dialog.dismiss()  # type: ignore[attr-defined]

        page.on("dialog", on_dialog)
        page.on(
            "console",
            lambda message: (
                self.csp_violations.append(message.text)
                if "Content Security Policy" in message.text
                else None
            ),
        )
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def assert_clean(self) -> None:
        assert self.dialogs == [], "a dialog opened"
        assert self.csp_violations == []
        assert self.errors == []


@dataclass
class Browsing:
    """New people (contexts) and tabs (pages) on the live server, watched."""

    browser: Browser
    server: LiveServer
    watch: Watch = field(default_factory=Watch)
    contexts: list[BrowserContext] = field(default_factory=list)

    def person(self) -> BrowserContext:
        context = self.browser.new_context(base_url=self.server.url, viewport=VIEWPORT)  # type: ignore[arg-type]
        context.set_default_timeout(TIMEOUT_MS)
        self.contexts.append(context)
        return context

    def tab(self, context: BrowserContext) -> Page:
        page = context.new_page()
        self.watch.attach(page)
        return page

    def logged_in(self, username: str, context: BrowserContext | None = None) -> Page:
        """A person's first tab (a new person's by default), logged in and on the queue with
        its socket up."""
        page = self.tab(context or self.person())
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{self.server.url}/")
        wait_live(page)
        return page


def wait_live(page: Page) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#connection")).to_have_text("Live")


@pytest.fixture
def browsing(browser: Browser, server: LiveServer) -> Iterator[Browsing]:
    session = Browsing(browser, server)
    yield session
    for context in session.contexts:
        context.close()
    session.watch.assert_clean()


def agent_client(
    server: LiveServer, name: str, *, mode: str = "danger_full_access"
) -> httpx.Client:
    """An agent with a token, and an HTTP client that speaks for it."""
    _, token = agent_with_token(name=name, mode=mode, allowed_principals="*")
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=15
    )


Screenshot = Callable[["Page", str], None]


@pytest.fixture
def screenshots_folder(tmp_path: Path) -> Path:
    """Where pictures go: docs/screenshots/ with ``COUNTERSIGN_SCREENSHOTS=1`` (``make
    screenshots``), else the test's own folder, so a test run leaves the docs' pictures as
    committed."""
    return SCREENSHOTS if os.environ.get("COUNTERSIGN_SCREENSHOTS") == "1" else tmp_path


@pytest.fixture
def screenshot(screenshots_folder: Path) -> Screenshot:
    """Takes a whole page's picture, from its top, into ``screenshots_folder``."""
    folder = screenshots_folder

    def save(page: Page, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")  # the sticky bar belongs at the top
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return save
