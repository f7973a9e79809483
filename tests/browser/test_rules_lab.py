"""The Rules lab in Chromium (docs/policy-lab.md, "The Rules lab"): a faulty line typed into
the draft is listed with its line and column without submitting anything, a call is tried
against the current rules and the draft, and a backtest's report comes onto the page. With
``COUNTERSIGN_SCREENSHOTS=1`` it takes the docs' rules-lab.png and backtest-report.png."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from approvals.models import Call
from approvals.services.decisions import call_decide
from tests.browser.conftest import PASSWORD, Browsing, Screenshot
from tests.factories import agent_make, call_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db(transaction=True)

LAB = "/admin/approvals/caprule/lab/"
START = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
FAULTY = "wire: transfer arg=amount max USD 2,000.00 -> gate finance"
DRAFT = (
    "big: pay arg=amount max USD 1000.00 -> gate finance\n"
    "daily: pay arg=amount sum USD 3000.00 per day -> gate finance\n"
    "shadow watch: pay arg=amount max USD 200.00 -> gate\n"
)


def history() -> None:
    """A week of payments made under "big" at USD 500, some held and decided."""
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    agent = agent_make(name="payments-bot", principal="carol", mode="danger_full_access")
    approver = user_make(username="ana")
    amounts = ["120", "640", "80", "950", "300", "1400", "75", "560", "2200", "410", "90", "700"]
    for index, amount in enumerate(amounts):
        at = START + timedelta(hours=13 * index)
        call = call_make(agent=agent, arguments=payment(amount), run_id=f"r{index % 3}", now=at)
        if call.status == Call.Status.PENDING:
            call_decide(
                call_id=call.pk,
                user=approver,
                approve=float(amount) < 2000,
                comment="",
                arguments_sha256=call.arguments_sha256,
                now=at + timedelta(minutes=20),
            )


def admin_lab(browsing: Browsing) -> Page:
    user_make(username="root", superuser=True, password=PASSWORD)
    page = browsing.tab(browsing.person())
    page.goto("/admin/login/")
    page.locator("#id_username").fill("root")
    page.locator("#id_password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile("/admin/$"))
    page.get_by_role("link", name="Rules lab").click()
    page.wait_for_url(re.compile(f"{LAB}$"))
    return page


def test_the_lab_checks_as_you_type_tries_a_call_and_backtests(
    browsing: Browsing, screenshot: Screenshot
) -> None:
    history()
    page = admin_lab(browsing)
    validation = page.locator("#lab-validation")
    expect(validation).to_contain_text("✓ 1 rule, no faulty line.")
    # A mark on this document: gone if the page were submitted and loaded again.
    page.evaluate("() => { document.body.dataset.typedHere = 'yes'; }")

    draft = page.locator("#id_draft")
    draft.click()
    page.keyboard.press("Control+End")
    page.keyboard.type(FAULTY)
    expect(validation).to_contain_text("1 faulty line")
    expect(validation.locator(".lab-error")).to_contain_text(
        "line 2, column 37: expected a currency code (amounts have no thousands separators)"
    )
    assert page.evaluate("() => document.body.dataset.typedHere") == "yes"
    assert page.url.endswith(LAB)

    page.locator("#id_agent").select_option(label="payments-bot")
    page.locator("#id_tool").fill("pay")
    page.locator("#id_arguments").fill('{"amount": "750.00", "currency": "USD"}')
    page.locator("#id_run_id").fill("try-1")
    page.get_by_label("the current rules").check()
    page.get_by_role("button", name="Try the call").click()
    expect(page.locator("#lab-try-status")).to_have_text("held")
    expect(page.locator("#lab-try-reasons")).to_contain_text("big")
    screenshot(page, "rules-lab")

    draft.fill(DRAFT)
    expect(validation).to_contain_text("✓ 3 rules (1 shadow), no faulty line.")
    page.get_by_label("the draft").check()
    page.get_by_role("button", name="Try the call").click()
    expect(page.locator("#lab-try-status")).to_have_text("allowed")
    expect(page.locator("#lab-try-shadow")).to_contain_text("watch")

    page.get_by_role("button", name="Run the backtest").click()
    expect(page.locator("#lab-backtest-calls")).to_have_text("12")
    expect(page.locator("#lab-backtest-actual")).to_contain_text("actual")
    changed = page.locator("#lab-backtest-changed tr.lab-change")
    expect(changed.first).to_be_visible()
    href = changed.first.locator("a").get_attribute("href") or ""
    assert re.fullmatch(r"/calls/[0-9a-f-]{36}/", href)
    assert page.evaluate("() => document.body.dataset.typedHere") == "yes"
    page.locator("#lab-backtest").scroll_into_view_if_needed()
    screenshot(page, "backtest-report")
