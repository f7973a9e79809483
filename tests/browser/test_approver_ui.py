"""The approver's pages in Chromium against a live server (config/serve.py).

State changes go through the server (the agent API over HTTP, the forms in the browser), so
that the pushes happen in the server's process; rows are set up with the ORM beforehand.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect
from websockets.asyncio.client import connect

from approvals.models import Gate
from tests.browser.conftest import PASSWORD, Browsing, Screenshot, agent_client, wait_live
from tests.factories import rule_make, user_make
from tests.live import LiveServer, start_server

pytestmark = pytest.mark.django_db(transaction=True)

XSS = "<img src=x onerror=alert(1)>"
JOIN_SECONDS = 10


class AgentSocket(threading.Thread):
    """An agent waiting on ``/ws/v1/calls/<id>`` with the ``websockets`` client, in a thread."""

    def __init__(self, server: LiveServer, agent: httpx.Client, call_id: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.ws_url}/ws/v1/calls/{call_id}"
        self.headers = {"Authorization": agent.headers["Authorization"]}
        self.states: list[dict[str, Any]] = []
        self.first = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        async def listen() -> None:
            async with connect(self.url, additional_headers=self.headers, open_timeout=10) as ws:
                async for raw in ws:  # ends with the server's 1000 after the final state
                    self.states.append(json.loads(raw)["call"])
                    self.first.set()

        try:
            asyncio.run(asyncio.wait_for(listen(), timeout=30))
        except BaseException as error:  # reported by the test
            self.error = error
        finally:
            self.first.set()

    def final_state(self) -> dict[str, Any]:
        self.join(JOIN_SECONDS)
        assert not self.is_alive(), "the agent's socket did not close"
        assert self.error is None, repr(self.error)
        return self.states[-1]


class LongPoll(threading.Thread):
    """An agent long-polling ``/api/v1/calls/<id>/wait``, in a thread."""

    def __init__(self, agent: httpx.Client, call_id: str) -> None:
        super().__init__(daemon=True)
        self.agent, self.call_id = agent, call_id
        self.state: dict[str, Any] | None = None

    def run(self) -> None:
        response = self.agent.get(f"/api/v1/calls/{self.call_id}/wait?timeout=20", timeout=30)
        self.state = response.json()

    def final_state(self) -> dict[str, Any]:
        self.join(JOIN_SECONDS)
        assert self.state is not None, "the long-poll did not answer"
        return self.state


def submit(agent: httpx.Client, tool: str, arguments: dict[str, Any], **fields: str) -> str:
    """The id of a call submitted through the API; asserts it is held."""
    response = agent.post(
        "/api/v1/calls", json={"tool": tool, "arguments": json.dumps(arguments), **fields}
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "pending"
    return str(response.json()["id"])


def open_call(page: Page, call_id: str) -> None:
    page.locator(f"#call-{call_id}").get_by_role("link").click()
    page.wait_for_url(re.compile(f"/calls/{call_id}/$"))
    wait_live(page)


def test_a_held_call_appears_live_is_approved_and_leaves_every_tab(
    browsing: Browsing, server: LiveServer, screenshot: Screenshot
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="daily: pay arg=amount sum USD 5000.00 per day -> gate")
    billing = agent_client(server, "billing-bot")
    ops = agent_client(server, "ops-agent", mode="prompt")
    # Some company in the queue, and 300.00 already spent today.
    assert (
        billing.post(
            "/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "300.00"}'}
        ).json()["status"]
        == "allowed"
    )
    submit(ops, "deploy.rollout", {"service": "api", "version": "2.4.1"}, run_id="release-7")
    submit(billing, "pay", {"amount": "640.00", "payee": "Northwind"}, principal="alice")

    first = browsing.logged_in("alice")
    second = browsing.tab(first.context)
    second.goto("/")
    wait_live(second)

    call_id = submit(
        billing,
        "pay",
        {"amount": "1250.00", "currency": "USD", "payee": "ACME Corp", "memo": "Invoice 117"},
        context="Paying ACME's March invoice, as asked in ticket #4411.",
    )
    for tab in (first, second):
        row = tab.locator(f"#mine #call-{call_id}")
        expect(row).to_contain_text("USD 1,250.00")
        expect(row).to_contain_text("pay")
        expect(row).to_contain_text("big")
    expect(first.locator("#mine-count")).to_have_text("2")
    expect(first).to_have_title("(2) Queue · Countersign")
    screenshot(first, "queue")

    agent_socket = AgentSocket(server, billing, call_id)
    agent_socket.start()
    assert agent_socket.first.wait(JOIN_SECONDS)
    assert agent_socket.states[0]["status"] == "pending"

    open_call(first, call_id)
    # 300.00 spent, 640.00 reserved by the held call, and this call.
    expect(first.locator(".caps")).to_contain_text("USD 2,190.00")
    comment = "Paid: the invoice matches PO 2024-117."
    first.get_by_label("Comment").fill(comment)
    screenshot(first, "call")
    first.get_by_role("button", name="Approve").click()
    expect(first.locator(f"#decide-{call_id}")).to_contain_text("approved by alice")
    expect(first.locator(f"#audit-{call_id}")).to_contain_text("call approved by alice")

    state = agent_socket.final_state()
    assert (state["status"], state["decision"]["comment"]) == ("approved", comment)
    expect(second.locator(f"#call-{call_id}")).to_have_count(0)
    expect(second.locator("#mine-count")).to_have_text("1")


def test_deny_returns_the_comment_to_a_long_polling_agent(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "bot")
    page = browsing.logged_in("alice")
    call_id = submit(agent, "pay", {"amount": "9000.00"})
    expect(page.locator(f"#call-{call_id}")).to_contain_text("USD 9,000.00")
    waiter = LongPoll(agent, call_id)
    waiter.start()
    open_call(page, call_id)
    comment = "Too much for one payment; split it and ask again."
    page.get_by_label("Comment").fill(comment)
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(f"#decide-{call_id}")).to_contain_text("denied by alice")
    state = waiter.final_state()
    assert (state["status"], state["decision"]["comment"]) == ("denied", comment)


def test_a_two_approval_gate_shows_one_of_two_in_both_approvers_tabs(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    user_make(username="bob", password=PASSWORD)
    rule_make(line="wire: wire arg=amount max USD 1000.00 -> gate treasury")
    Gate.objects.filter(name="treasury").update(required_approvals=2)
    agent = agent_client(server, "treasurer")
    alice, bob = browsing.logged_in("alice"), browsing.logged_in("bob")
    call_id = submit(agent, "wire", {"amount": "25000.00"})
    for page in (alice, bob):
        expect(page.locator(f"#call-{call_id}")).to_contain_text("0 of 2")
        open_call(page, call_id)
        expect(page.locator(f"#live-{call_id}")).to_contain_text("0 of 2")
    bob.get_by_label("Comment").fill("Checking the IBAN first")

    alice.get_by_role("button", name="Approve").click()
    for page in (alice, bob):
        expect(page.locator(f"#live-{call_id}")).to_contain_text("1 of 2")
        expect(page.locator(f"#live-{call_id}")).to_contain_text("approved by alice")
    expect(alice.locator(f"#decide-{call_id}")).to_contain_text("It waits for more approvals")
    # The push did not touch bob's form: what he is typing is still there.
    expect(bob.get_by_label("Comment")).to_have_value("Checking the IBAN first")

    bob.get_by_role("button", name="Approve").click()
    for page in (alice, bob):
        expect(page.locator(f"#decide-{call_id}")).to_contain_text("approved by bob")


def test_a_hostile_argument_renders_as_text_and_opens_no_dialog(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "bot")
    page = browsing.logged_in("alice")
    call_id = submit(
        agent,
        "pay",
        {"amount": "600.00", "memo": XSS, XSS: "<script>alert(2)</script>"},
        context=f"<b>bold</b> {XSS}",
        run_id=XSS,
    )
    expect(page.locator(f"#call-{call_id}")).to_be_visible()
    open_call(page, call_id)
    expect(page.locator(".arguments")).to_contain_text(f'"memo": "{XSS}"')
    expect(page.locator(".arguments")).to_contain_text("<script>alert(2)</script>")
    expect(page.locator(".context")).to_contain_text(f"<b>bold</b> {XSS}")
    expect(page.locator("img[src=x]")).to_have_count(0)
    expect(page.locator("main b")).to_have_count(0)
    page.wait_for_timeout(300)  # room for an onerror that must not fire
    assert browsing.watch.dialogs == []


def test_a_viewer_sees_no_buttons_and_a_forged_post_is_403(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="victor", decide=False, view=True, password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "bot")
    page = browsing.logged_in("victor")
    call_id = submit(agent, "pay", {"amount": "600.00"})
    expect(page.locator(f"#others #call-{call_id}")).to_be_visible()
    open_call(page, call_id)
    expect(page.locator(f"#decide-{call_id}")).to_contain_text("may not decide it")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Deny")).to_have_count(0)
    expect(page.get_by_role("button", name="Extend")).to_have_count(0)

    headers = json.loads(page.locator("body").get_attribute("hx-headers") or "{}")
    digest = agent.get(f"/api/v1/calls/{call_id}").json()["arguments_sha256"]
    for verb in ("approve", "deny", "extend"):
        forged = page.request.post(
            f"/calls/{call_id}/{verb}",
            form={"comment": "sneaky", "arguments_sha256": digest},
            headers={**headers, "Referer": page.url},
        )
        assert forged.status == 403, verb
    assert agent.get(f"/api/v1/calls/{call_id}").json()["status"] == "pending"


def test_the_api_docs_render_under_the_policy(browsing: Browsing) -> None:
    page = browsing.tab(browsing.person())
    page.goto("/api/v1/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock-summary-path").first).to_contain_text("/api/v1/")


def test_after_a_server_restart_the_queue_reconnects_and_rerenders(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "bot")
    page = browsing.logged_in("alice")
    server.stop()
    expect(page.locator("#connection")).to_have_text("Reconnecting…")
    restarted = start_server(port=server.port)
    try:
        call_id = submit(agent, "pay", {"amount": "777.00"})
        wait_live(page)
        expect(page.locator(f"#call-{call_id}")).to_contain_text("USD 777.00")
    finally:
        restarted.stop()


# Keeps every WebSocket the page opens within reach of the test (injected by the browser, so
# the page's Content-Security-Policy does not apply to it).
RECORD_SOCKETS = """
(() => {
  const Original = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (url, protocols) {
    const socket = new Original(url, protocols);
    window.__sockets.push(socket);
    return socket;
  };
  window.WebSocket.prototype = Original.prototype;
  Object.assign(window.WebSocket, {
    CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3,
  });
})();
"""


def test_after_a_clean_close_the_page_reconnects_by_itself(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_client(server, "bot")
    context = browsing.person()
    context.add_init_script(RECORD_SOCKETS)
    page = browsing.logged_in("alice", context)
    assert page.evaluate("window.__sockets.length") == 1
    # A close with 1000, which the ws extension itself would never follow with a reconnect.
    page.evaluate("window.__sockets[0].close(1000)")
    expect(page.locator("#connection")).to_have_text("Reconnecting…")
    wait_live(page)
    assert page.evaluate("window.__sockets.length") == 2
    call_id = submit(agent, "pay", {"amount": "888.00"})
    expect(page.locator(f"#call-{call_id}")).to_contain_text("USD 888.00")
