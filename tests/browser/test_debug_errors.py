"""Under ``DEBUG=1`` (``make run``), an htmx request answered 400 or 403 shows its reason in
the page, as with ``DEBUG=0``: the page is kept, never replaced by the bare answer."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Browser, expect

from approvals.models import Call
from tests.browser.conftest import PASSWORD, Browsing, agent_client, wait_live
from tests.factories import gate_make, rule_make, user_make
from tests.live import LiveServer, live_server

pytestmark = pytest.mark.django_db(transaction=True)

DUPLICATE_KEY = '{"amount": "600.00", "amount": "700.00"}'


@pytest.fixture
def debug_server(transactional_db: None, browser: Browser) -> Iterator[LiveServer]:
    with live_server(extra_env={"DEBUG": "1"}) as running:
        yield running


@pytest.fixture
def debug_browsing(browser: Browser, debug_server: LiveServer) -> Iterator[Browsing]:
    session = Browsing(browser, debug_server)
    yield session
    for context in session.contexts:
        context.close()
    session.watch.assert_clean()


def test_a_refused_edit_under_debug_shows_its_reason_in_the_kept_page(
    debug_browsing: Browsing, debug_server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(debug_server, "billing-bot")
    held = agent.post("/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "1250.00"}'})
    assert held.json()["status"] == "pending"
    call_id = held.json()["id"]

    page = debug_browsing.logged_in("alice")
    page.goto(f"/calls/{call_id}/")
    wait_live(page)
    page.get_by_text("Edit arguments").click()
    page.get_by_label("Arguments (a JSON object)").fill(DUPLICATE_KEY)
    with page.expect_response(re.compile(rf"/calls/{call_id}/approve")) as answered:
        page.get_by_role("button", name="Approve").click()
    assert answered.value.status == 400

    # The reason in the page's notice; the page itself (its bar, its styles, its form) kept.
    expect(page.locator("#notice")).to_contain_text("duplicate member name")
    expect(page.locator("#notice")).to_be_visible()
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert page.evaluate("document.styleSheets.length") > 0
    wait_live(page)
    assert Call.objects.get(pk=call_id).status == "pending"


def test_a_forbidden_answer_under_debug_shows_in_the_page(
    debug_browsing: Browsing, debug_server: LiveServer
) -> None:
    """A 403 with a reason: an edit into a gate the approver may not decide at."""
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="vast: pay arg=amount max USD 900.00 -> gate treasury")
    gate_make(name="treasury", group=Group.objects.create(name="treasury"))
    agent = agent_client(debug_server, "billing-bot")
    held = agent.post("/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "600.00"}'})
    call_id = held.json()["id"]

    page = debug_browsing.logged_in("alice")
    page.goto(f"/calls/{call_id}/")
    wait_live(page)
    page.get_by_text("Edit arguments").click()
    page.get_by_label("Arguments (a JSON object)").fill('{"amount": "950.00"}')
    with page.expect_response(re.compile(rf"/calls/{call_id}/approve")) as answered:
        page.get_by_role("button", name="Approve").click()
    assert answered.value.status == 403

    expect(page.locator("#notice")).to_contain_text("treasury")
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert Call.objects.get(pk=call_id).status == "pending"
