"""Edit, then approve, in Chromium: an agent waits through the Python client's ``gated``; one
approver edits the arguments on the call page and approves, a second one (told on their open
page that the arguments changed) approves the edited version; the agent's function runs with
the edited arguments."""

from __future__ import annotations

import re
import threading
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import expect

from countersign import Client
from tests.browser.conftest import PASSWORD, Browsing, Screenshot, agent_client, wait_live
from tests.factories import gate_make, rule_make, user_make
from tests.live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

JOIN_SECONDS = 15
EDITED = '{"amount": "600.00", "payee": "ACME Corp", "memo": "first part of invoice 117"}'


class GatedAgent(threading.Thread):
    """An agent calling a ``gated`` function and waiting live for its approval."""

    def __init__(self, server: LiveServer, token: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(server.url, token=token)
        self.ran_with: dict[str, Any] | None = None
        self.error: BaseException | None = None

        @self.client.gated("pay", deadline=30)
        def pay(amount: Decimal, payee: str, memo: str = "") -> str:
            self.ran_with = {"amount": amount, "payee": payee, "memo": memo}
            return "paid"

        self.pay = pay

    def run(self) -> None:
        try:
            assert self.pay(Decimal("1250.00"), "ACME Corp", memo="invoice 117") == "paid"
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.client.close()


def test_an_approver_edits_the_arguments_and_the_waiting_agent_runs_with_them(
    browsing: Browsing, server: LiveServer, screenshot: Screenshot
) -> None:
    user_make(username="alice", password=PASSWORD)
    user_make(username="bob", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 per day -> gate")
    gate_make(name="", required_approvals=2)
    http = agent_client(server, "billing-bot")
    token = str(http.headers["Authorization"]).removeprefix("Bearer ")
    agent = GatedAgent(server, token)
    agent.start()

    page, other = browsing.logged_in("alice"), browsing.logged_in("bob")
    for tab in (page, other):
        expect(tab.locator("#mine")).to_contain_text("USD 1,250.00")
        tab.locator("#mine .row-link").first.click()
        tab.wait_for_url(re.compile(r"/calls/[0-9a-f-]+/$"))
        wait_live(tab)

    page.get_by_text("Edit arguments").click()
    field = page.get_by_label("Arguments (a JSON object)")
    expect(field).to_be_enabled()
    field.fill('{"amount": "600.00",')
    expect(page.locator(".edit-check")).to_contain_text("Not JSON")
    expect(field).to_have_attribute("aria-invalid", "true")
    field.fill(EDITED)
    expect(page.locator(".edit-check")).to_contain_text("Edited")
    page.get_by_label("Comment").fill("600 now, the rest next month.")
    screenshot(page, "call-edit")
    page.get_by_role("button", name="Approve").click()

    expect(page.locator(".audit")).to_contain_text("call edited by alice")
    expect(page.locator(".original-arguments")).to_contain_text('"1250.00"')
    expect(page.locator(".badge-edited")).to_be_visible()
    expect(page.locator(".live")).to_contain_text("1 of 2")
    # Bob's page still shows the agent's version, and is told it changed.
    expect(other.locator("#notice")).to_contain_text("The arguments were edited")
    other.reload()
    wait_live(other)
    expect(other.locator(".arguments").first).to_contain_text('"600.00"')
    other.get_by_role("button", name="Approve").click()
    expect(other.locator(".decide")).to_contain_text("approved by bob")
    agent.join(JOIN_SECONDS)
    assert not agent.is_alive(), "the gated function did not return"
    assert agent.error is None, repr(agent.error)
    assert agent.ran_with == {
        "amount": "600.00",
        "payee": "ACME Corp",
        "memo": "first part of invoice 117",
    }
    # The agent's own read of the call: edited, with both digests.
    (state,) = http.get("/api/v1/calls").json()["items"]
    assert (state["status"], state["edited"], state["arguments"]) == ("approved", True, EDITED)
    assert state["original_arguments_sha256"] not in (None, state["arguments_sha256"])
