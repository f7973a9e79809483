"""Desktop notifications and the web app manifest in Chromium against a live server: the
queue's button asks for permission only when clicked, then each new call this person may
decide is a Notification (observed by wrapping ``window.Notification`` before the page's
scripts run); the tab title keeps the count; the manifest parses as Chromium reads it."""

from __future__ import annotations

import struct
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PASSWORD, VIEWPORT, Browsing, agent_client
from tests.browser.test_approver_ui import submit
from tests.factories import rule_make, user_make
from tests.live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

# Records every Notification the page makes, and reports the permission as not yet asked
# until the page asks (the context grants it, so the real request then answers "granted").
OBSERVE_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  let asked = false;
  window.__notes = [];
  window.__asked = 0;
  function Observed(title, options) {
    window.__notes.push({ title, body: (options || {}).body, tag: (options || {}).tag });
    return new Real(title, options);
  }
  Object.defineProperty(Observed, "permission", {
    get: () => (asked ? Real.permission : "default"),
  });
  Observed.requestPermission = (callback) => {
    asked = true;
    window.__asked += 1;
    return Real.requestPermission(callback);
  };
  window.Notification = Observed;
})();
"""


def notes(page: Page) -> list[dict[str, Any]]:
    return list(page.evaluate("window.__notes"))


def test_a_new_call_to_decide_is_a_desktop_notification_once_allowed(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "billing-bot")
    context = browsing.browser.new_context(
        base_url=server.url,
        viewport=VIEWPORT,  # type: ignore[arg-type]
        permissions=["notifications"],
    )
    browsing.contexts.append(context)
    context.add_init_script(OBSERVE_NOTIFICATIONS)
    page = browsing.logged_in("alice", context)
    expect(page).to_have_title("Queue · Countersign")
    button = page.locator("#notify-toggle")
    expect(button).to_have_text("Enable desktop notifications")
    assert page.evaluate("window.__asked") == 0  # nothing asked unprompted

    # Not allowed yet: the row and the count arrive, no notification.
    first = submit(agent, "pay", {"amount": "1250.00"})
    expect(page.locator(f"#mine #call-{first}")).to_be_visible()
    expect(page).to_have_title("(1) Queue · Countersign")
    assert notes(page) == []

    button.click()
    expect(button).to_have_text("Turn off desktop notifications")
    expect(page.locator("#notify-state")).to_contain_text("Desktop notifications are on")
    assert page.evaluate("window.__asked") == 1

    second = submit(agent, "pay", {"amount": "2000.00"}, run_id="run-9")
    expect(page).to_have_title("(2) Queue · Countersign")
    page.wait_for_function("window.__notes.length === 1")
    [note] = notes(page)
    assert note["title"] == "To decide: pay USD 2,000.00"
    assert note["body"].startswith("billing-bot for carol · ")
    assert note["body"].endswith(" left")
    assert note["tag"] == f"countersign-call-{second}"

    # A call alice may not decide (her own) is no notification, and no count of hers.
    own = submit(agent, "pay", {"amount": "900.00"}, principal="alice")
    expect(page.locator(f"#others #call-{own}")).to_be_visible()
    expect(page).to_have_title("(2) Queue · Countersign")
    assert len(notes(page)) == 1

    # Turned off here: none, though the browser still allows them.
    button.click()
    expect(button).to_have_text("Enable desktop notifications")
    third = submit(agent, "pay", {"amount": "700.00"})
    expect(page.locator(f"#mine #call-{third}")).to_be_visible()
    expect(page).to_have_title("(3) Queue · Countersign")
    assert len(notes(page)) == 1

    # The manifest, as Chromium reads it for "Add to Home screen".
    cdp = context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"] == f"{server.url}/manifest.webmanifest"
    assert manifest["errors"] == []
    assert '"start_url": "/"' in manifest["data"]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_manifest_and_its_icons_are_served(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        answer = http.get("/manifest.webmanifest")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/manifest+json"
        manifest = answer.json()
        assert (manifest["start_url"], manifest["display"]) == ("/", "standalone")
        sizes = {}
        for icon in manifest["icons"]:
            image = http.get(icon["src"])
            assert image.status_code == 200, icon
            assert image.headers["content-type"] == icon["type"]
            if icon["type"] == "image/png":
                sizes[icon["sizes"], icon.get("purpose", "any")] = png_size(image.content)
        assert sizes == {
            ("192x192", "any"): (192, 192),
            ("512x512", "any"): (512, 512),
            ("512x512", "maskable"): (512, 512),
        }
        login = http.get("/accounts/login/").text
        assert '<link rel="manifest" href="/manifest.webmanifest">' in login
