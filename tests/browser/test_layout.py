"""Layout in Chromium: names read whole at a desktop's and a phone's width, the decision in
reach on a phone, and the admin's look under the Content-Security-Policy (docs/ui.md).

Rows are set up with the ORM and the services before the pages load: these tests read pages,
they do not wait for pushes (except the decision, made in the browser).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import Page, expect

from approvals.models import Call, CapRule
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import call_cancel, calls_expire_due
from tests.browser.conftest import PASSWORD, Browsing, wait_live
from tests.factories import agent_make, call_make, payment, rule_make, user_make
from tests.live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

DESKTOP = {"width": 1280, "height": 800}
TABLET = {"width": 800, "height": 1000}
PHONE = {"width": 390, "height": 844}
LONG_TOOL = "wire.transfer.international.sepa-instant"
LONG_COMMENT = "Declined: the payee's IBAN does not match the one on file for this supplier."

# Each element's text as line fragments: one distinct top edge is one line. An inline-block
# is one box however many lines it holds, so its box's rectangles cannot tell.
LINES_JS = """selector => Array.from(document.querySelectorAll(selector)).map(element => {
  const range = document.createRange();
  range.selectNodeContents(element);
  const tops = new Set(Array.from(range.getClientRects())
    .filter(rect => rect.width > 0).map(rect => Math.round(rect.top)));
  const boxed = getComputedStyle(element).display !== "inline";
  return {
    text: element.textContent,
    lines: tops.size,
    cut: boxed && element.scrollWidth > element.clientWidth + 1,
  };
})"""


def lines_of(page: Page, selector: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(LINES_JS, selector)
    assert found, f"nothing matches {selector}"
    return found


def assert_whole(page: Page, selector: str) -> None:
    """Every element on one line and shown whole (not cut short by an ellipsis)."""
    broken = [found for found in lines_of(page, selector) if found["lines"] != 1 or found["cut"]]
    assert broken == [], f"{selector} wraps or is cut at {page.viewport_size}"


def in_viewport(page: Page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    viewport = page.viewport_size
    assert box is not None
    assert viewport is not None
    return (
        box["y"] >= 0
        and box["y"] + box["height"] <= viewport["height"]
        and box["x"] >= 0
        and box["x"] + box["width"] <= viewport["width"]
    )


T = TypeVar("T")


def off_the_loop(setup: Callable[[], T]) -> T:
    """``setup`` run in a thread of its own: the services push after commit through
    ``async_to_sync``, which refuses to run in Playwright's thread (an event loop runs there)."""

    def run() -> T:
        try:
            return setup()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def held_calls() -> str:
    """Calls in every final status, held by ``mode:prompt`` and at the gate ``treasury``; the
    id of one still pending at both."""
    deciders = user_make(username="alice", password=PASSWORD)
    rule_make(line="treasury-cap: pay,wire arg=amount max USD 500.00 -> gate treasury")
    rule_make(line="blocked: " + LONG_TOOL + " arg=amount max USD 1.00 -> refuse")
    billing = agent_make(name="billing-bot-for-the-finance-team")
    prompt = agent_make(name="ops-agent", mode="prompt")

    call_make(agent=billing, arguments=payment("20.00"))  # allowed
    call_make(agent=billing, tool=LONG_TOOL, arguments=payment("5.00"))  # refused
    for approve, agent in ((True, billing), (False, prompt)):
        call = call_make(agent=agent, tool="wire", arguments=payment("900.00"))
        call_decide(
            call_id=call.pk,
            user=deciders,
            approve=approve,
            comment="" if approve else LONG_COMMENT,
            arguments_sha256=call.arguments_sha256,
        )
    cancelled = call_make(agent=prompt, tool="deploy.rollout", arguments="{}")
    call_cancel(agent=prompt, call_id=cancelled.pk)
    call_make(agent=prompt, tool="deploy.rollout", now=timezone.now() - timedelta(days=2))
    calls_expire_due()

    pending = call_make(
        agent=prompt,
        tool="pay",
        arguments=json.dumps(
            {"amount": "900.00", "payee": "Northwind Traders", "memo": "x" * 2000}
        ),
        context="Paying Northwind's invoice 2024-117, as asked in ticket #4411. " * 20,
    )
    assert pending.status == Call.Status.PENDING
    return str(pending.pk)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_pills_chips_and_gate_names_never_break_mid_word(
    browsing: Browsing, viewport: dict[str, int]
) -> None:
    pending = off_the_loop(held_calls)
    page = browsing.logged_in("alice")
    page.set_viewport_size(viewport)  # type: ignore[arg-type]

    page.goto("/history/")
    statuses = {found["text"] for found in lines_of(page, ".history-table .badge")}
    assert statuses == {"allowed", "refused", "approved", "denied", "cancelled", "expired"}
    assert "mode:prompt" in {found["text"] for found in lines_of(page, "code.rule")}
    assert_whole(page, ".history-table .badge")
    assert_whole(page, ".history-table code.rule")

    page.goto(f"/calls/{pending}/")
    wait_live(page)
    expect(page.locator(".gates")).to_contain_text("treasury")
    assert_whole(page, ".status-line .badge")
    assert_whole(page, ".gates th code")
    assert_whole(page, ".reason-rule code")
    assert_whole(page, ".caps th code")


def test_on_a_phone_the_amount_and_approve_stay_in_reach_and_approve_works(
    browsing: Browsing, screenshots_folder: Path
) -> None:
    pending = off_the_loop(held_calls)
    page = browsing.logged_in("alice")
    page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    page.goto(f"/calls/{pending}/")
    wait_live(page)

    bar_amount = ".decision .bar-what .amount"
    expect(page.locator(bar_amount)).to_have_text("USD 900.00")
    assert page.evaluate("window.scrollY") == 0
    assert in_viewport(page, bar_amount)
    assert in_viewport(page, ".decision button.approve")
    assert in_viewport(page, ".decision button.deny")
    # What a phone shows on load (a full-page shot would draw the fixed bar mid-page).
    page.screenshot(path=str(screenshots_folder / "call-phone.png"))

    # Everything can still be read: halfway down, and the last panel clear of the bar.
    page.locator(".arguments").scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 0
    assert in_viewport(page, bar_amount)
    assert in_viewport(page, ".decision button.approve")
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    last = page.locator(".audit").bounding_box()
    bar = page.locator(".decision .actions").bounding_box()
    assert last is not None
    assert bar is not None
    assert last["y"] + last["height"] <= bar["y"]

    page.locator(".decision button.approve").click()
    expect(page.locator(f"#decide-{pending}")).to_contain_text("approved by alice")
    assert Call.objects.get(pk=pending).status == Call.Status.APPROVED


def test_on_a_phone_the_batch_bar_takes_no_room_until_a_call_is_selected(
    browsing: Browsing,
) -> None:
    def setup() -> None:
        user_make(username="alice", password=PASSWORD)
        rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
        agent = agent_make()
        for cents in range(3):
            call_make(agent=agent, arguments=payment(f"60{cents}.00"))

    off_the_loop(setup)
    page = browsing.logged_in("alice")
    page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    rows = page.locator("#mine .row")
    expect(rows).to_have_count(3)
    bar = page.locator("#batch")
    buttons = [page.get_by_role("button", name=f"{verb} selected") for verb in ("Approve", "Deny")]

    # Nothing selected: only "All" is left, a slim line after the last row, over none.
    expect(page.locator("#pick-all")).to_be_visible()
    for hidden in (page.locator("#batch-comment"), *buttons):
        expect(hidden).to_be_hidden()
    box, last = bar.bounding_box(), rows.last.bounding_box()
    assert box is not None
    assert last is not None
    assert box["height"] <= 0.06 * PHONE["height"]
    assert box["y"] >= last["y"] + last["height"]
    assert bar.evaluate("bar => getComputedStyle(bar).position") == "static"

    # One selected: the comment and both buttons, held in reach at the bottom.
    rows.first.locator("input.pick").check()
    for shown in (page.locator("#batch-comment"), *buttons):
        expect(shown).to_be_visible()
    assert bar.evaluate("bar => getComputedStyle(bar).position") == "sticky"
    assert in_viewport(page, "#batch button.approve")
    assert in_viewport(page, "#batch button.deny")

    # Unselected again: slim again. On a desktop the bar stays whole: it is one line there.
    rows.first.locator("input.pick").uncheck()
    expect(buttons[0]).to_be_hidden()
    page.set_viewport_size(DESKTOP)  # type: ignore[arg-type]
    expect(buttons[0]).to_be_visible()
    expect(buttons[0]).to_be_disabled()


def admin_logged_in(browsing: Browsing) -> Page:
    user_make(username="root", superuser=True, password=PASSWORD)
    page = browsing.tab(browsing.person())
    page.goto("/admin/login/")
    page.locator("#id_username").fill("root")
    page.locator("#id_password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile("/admin/$"))
    return page


def test_the_admin_marks_a_broken_rule_red_and_keeps_the_action_column_on_screen(
    browsing: Browsing,
) -> None:
    many_tools = ",".join(f"payments.outbound.tool{n}" for n in range(12))
    line = (
        f"outbound-daily-limit-for-every-payee: {many_tools} arg=payment.amount.value "
        "currency=payment.amount.currency sum USD 100000.00, EUR 90000.00, GBP 80000.00, "
        "JPY 15000000 per 7d by arg=payment.payee.iban lower trim -> gate treasury"
    )
    off_the_loop(lambda: rule_make(line=line))
    broken = off_the_loop(lambda: rule_make(line="big: pay arg=amount max USD 500.00 -> gate"))
    CapRule.objects.filter(pk=broken.pk).update(line="big: pay arg=amount max QQQ 500.00")
    page = admin_logged_in(browsing)
    page.set_viewport_size(DESKTOP)  # type: ignore[arg-type]

    page.goto("/admin/approvals/caprule/")
    marker = page.locator(".cs-broken-enabled")
    expect(marker).to_contain_text("NO LONGER PARSES")
    assert marker.evaluate("element => getComputedStyle(element).backgroundColor") == (
        "rgb(186, 33, 33)"
    )
    # On screen, and not scrolled out of the list's own box (which scrolls sideways).
    action = page.locator("#result_list th.column-rule_action")
    expect(action).to_be_visible()
    assert in_viewport(page, "#result_list th.column-rule_action")
    assert page.locator("#changelist .results").evaluate(
        "results => results.scrollWidth <= results.clientWidth"
    )
    # The cell cut short keeps its whole text in its tooltip.
    cap = page.locator("#result_list td.field-cap .cs-clip").first
    assert "by arg=payment.payee.iban lower trim" in (cap.get_attribute("title") or "")


def test_favicon_ico_answers_with_an_icon(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/favicon.ico", follow_redirects=True, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/")
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO file


# Each form field whose box passes the right edge of its form row, or of the window.
FIELDS_PAST_THEIR_ROW_JS = """() => Array.from(document.querySelectorAll(
  '#content-main form .form-row :is(input:not([type=hidden]), textarea, select)'
)).filter(field => field.getClientRects().length).flatMap(field => {
  const box = field.getBoundingClientRect();
  const row = field.closest('.form-row').getBoundingClientRect();
  return box.right > row.right + 0.5 || box.right > window.innerWidth
    ? [`${field.name || field.id}: ${Math.round(box.right)} > ${Math.round(row.right)}`] : [];
})"""


@pytest.mark.parametrize("viewport", [DESKTOP, TABLET, PHONE], ids=["1280", "800", "390"])
def test_admin_form_fields_fit_their_form(browsing: Browsing, viewport: dict[str, int]) -> None:
    """The rule line (size=120), a long choice, an Apprise URL and the permissions chooser,
    at the widths where the admin's side navigation takes its room or does not."""
    rule = off_the_loop(
        lambda: rule_make(line="big: pay arg=amount max USD 500.00 -> gate treasury")
    )
    page = admin_logged_in(browsing)
    page.set_viewport_size(viewport)  # type: ignore[arg-type]
    for path in (
        f"/admin/approvals/caprule/{rule.pk}/change/",
        "/admin/approvals/caprule/add/",
        "/admin/approvals/agent/add/",
        "/admin/approvals/budget/add/",
        "/admin/notifications/notificationchannel/add/",
        "/admin/auth/group/add/",
    ):
        page.goto(path)
        expect(page.locator("#content-main form")).to_be_visible()
        assert page.evaluate(FIELDS_PAST_THEIR_ROW_JS) == [], f"{path} at {viewport}"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
