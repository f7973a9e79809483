"""A page on another port of the same host cannot read the approver's live queue (issue 13:
a page on ``http://127.0.0.1:9999`` read the queue of the server on ``:8222`` in Chromium,
riding the approver's cookie, which ignores ports). Now the queue socket accepts only the
site's own origin, port included (approvals/realtime/origins.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.browser.conftest import PASSWORD, Browsing, agent_client
from tests.browser.test_approver_ui import submit
from tests.factories import rule_make, user_make
from tests.live import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

ELSEWHERE = b"<!doctype html><title>elsewhere</title><p>Nothing to see here.</p>"
# Opens the socket as the attacker's page would, and reports what it got: whether it opened,
# how many messages came (and the first one), and the close code. Resolves within 5 s.
READ_QUEUE = """
(url) => new Promise((resolve) => {
  const seen = {opened: false, messages: 0, first: null, code: null};
  const socket = new WebSocket(url);
  socket.onopen = () => { seen.opened = true; };
  socket.onmessage = (event) => {
    seen.messages += 1;
    if (seen.first === null) seen.first = String(event.data).slice(0, 2000);
    socket.close();
  };
  socket.onclose = (event) => { seen.code = event.code; resolve(seen); };
  setTimeout(() => resolve(seen), 5000);
})
"""


class _Elsewhere(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(ELSEWHERE)))
        self.end_headers()
        self.wfile.write(ELSEWHERE)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextmanager
def page_elsewhere() -> Iterator[str]:
    """A tiny site on another port of 127.0.0.1: its URL."""
    site = ThreadingHTTPServer(("127.0.0.1", 0), _Elsewhere)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}/"
    finally:
        site.shutdown()
        site.server_close()
        thread.join(5)


def test_a_page_on_another_port_gets_nothing_from_the_queue_socket(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    call_id = submit(agent_client(server, "secret-bot"), "pay", {"amount": "7777.00"})
    page = browsing.logged_in("alice")
    queue_url = f"{server.ws_url}/ws/v1/queue"

    # The site's own page, same browser, same cookie: the socket gives it the queue.
    own = page.evaluate(READ_QUEUE, queue_url)
    assert own["opened"]
    assert own["messages"] >= 1
    assert call_id in own["first"]

    # Another port of the same host, in the approver's browser (her cookies go along).
    with page_elsewhere() as elsewhere:
        attacker = page.context.new_page()
        attacker.goto(elsewhere)
        stolen = attacker.evaluate(READ_QUEUE, queue_url)
        attacker.close()
    assert stolen["opened"] is False
    assert stolen["messages"] == 0
    assert stolen["first"] is None
    assert stolen["code"] == 1006  # refused at the handshake: an HTTP 403, no socket
