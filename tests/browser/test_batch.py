"""Deciding many calls at once in Chromium: rows picked with the keyboard and the mouse stay
picked across live pushes, and a call another approver denied meanwhile is reported while
the others are approved. The queue's screenshot for the docs is taken here."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from websockets.sync.client import connect

from tests.browser.conftest import PASSWORD, Browsing, Screenshot, agent_client
from tests.browser.test_approver_ui import submit
from tests.factories import rule_make, user_make
from tests.live import Approver

pytestmark = pytest.mark.django_db(transaction=True)


def test_batch_approve_three_when_another_approver_denied_one_meanwhile(
    browsing: Browsing, screenshot: Screenshot
) -> None:
    user_make(username="alice", password=PASSWORD)
    user_make(username="bob", password=PASSWORD)
    rule_make(line="big: pay arg=amount currency=currency max USD 500.00, EUR 400.00 -> gate")
    agent = agent_client(browsing.server, "billing-bot")
    token = agent.headers["Authorization"]
    first, second, third = (
        submit(agent, "pay", {"amount": amount, "currency": "USD"})
        for amount in ("1250.00", "980.00", "4321.00")
    )
    unreadable = submit(agent, "pay", {"amount": "12.345", "currency": "USD"})

    page = browsing.logged_in("alice")
    rows = {call: page.locator(f"#call-{call}") for call in (first, second, third, unreadable)}
    expect(rows[unreadable]).to_contain_text("amount not readable: too many decimals for USD")
    expect(rows[first]).to_contain_text("no agent has waited")

    # An agent waits for the first call: the queue says so, live.
    waiter = connect(
        f"{browsing.server.ws_url}/ws/v1/calls/{first}", additional_headers={"Authorization": token}
    )
    try:
        waiter.recv(timeout=10)
        expect(rows[first]).to_contain_text("agent waiting")

        # The first and third with the keyboard (j moves, x selects), the second with the mouse.
        page.keyboard.press("j")
        page.keyboard.press("x")
        page.keyboard.press("j")
        page.keyboard.press("j")
        page.keyboard.press("x")
        rows[second].locator("input.pick").check()
        expect(page.locator("#picked")).to_have_text("3 selected")
        for call in (first, second, third):
            expect(rows[call].locator("input.pick")).to_be_checked()
        expect(rows[unreadable].locator("input.pick")).not_to_be_checked()
        page.locator("#batch-comment").fill("Invoices checked against the purchase orders")
        screenshot(page, "queue-batch")
    finally:
        waiter.close()
    # The agent went away: a push re-renders every row, and the picks stay.
    expect(rows[first]).to_contain_text("no agent waiting since")
    for call in (first, second, third):
        expect(rows[call].locator("input.pick")).to_be_checked()

    # Meanwhile Bob denies the second: it leaves Alice's queue, and stays in her selection.
    bob = Approver(browsing.server, "bob", PASSWORD)
    try:
        assert bob.decide(second, approve=False, comment="duplicate invoice") == 303
    finally:
        bob.close()
    expect(rows[second]).to_have_count(0)
    expect(page.locator("#picked")).to_have_text("3 selected (1 no longer in the queue)")

    page.get_by_role("button", name="Approve selected").click()
    result = page.locator("#batch-result")
    expect(result).to_contain_text("2 approved, 1 not decided")
    expect(result.locator(f"li[data-call='{second}']")).to_contain_text(
        "not decided — the call is already final"
    )
    for call in (first, third):
        expect(result.locator(f"li[data-call='{call}']")).to_contain_text("approved")
        expect(rows[call]).to_have_count(0)
    expect(rows[unreadable]).to_have_count(1)
    expect(page.locator("#picked")).to_have_text("")
    for call, status in ((first, "approved"), (second, "denied"), (third, "approved")):
        assert agent.get(f"/api/v1/calls/{call}").json()["status"] == status
