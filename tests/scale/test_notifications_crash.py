"""The outbox survives a crash: a real server killed (SIGKILL) after holds commit and before
their messages are delivered loses none of them; once restarted it delivers each, exactly as
committed."""

from __future__ import annotations

import json
import signal
from collections import Counter

import httpx
import pytest

from notifications.models import Notification
from tests.live import start_server
from tests.outbox import HOLD_RULE, webhook_channel, webhook_of
from tests.receivers import Received, http_receiver
from tests.scale.servers import NO_RATE_LIMIT, agent_create, bearer, restart_on, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = 50


def test_messages_committed_before_a_sigkill_all_arrive_after_the_restart() -> None:
    from approvals.services.rules import cap_rule_save

    cap_rule_save(line=HOLD_RULE)
    _, token = agent_create("crash-bot")
    down = [True]

    def answer(_: Received) -> tuple[int, dict[str, str]]:
        return (503, {}) if down[0] else (204, {})

    with http_receiver() as receiver:
        receiver.answer = answer
        webhook_channel(receiver.url + "/hook")
        server = start_server(extra_env=NO_RATE_LIMIT)
        try:
            with httpx.Client(base_url=server.url, timeout=10, headers=bearer(token)) as http:
                for _ in range(CALLS):
                    response = http.post(
                        "/api/v1/calls", json={"tool": "pay", "arguments": '{"amount": "900.00"}'}
                    )
                    assert response.status_code == 201, response.text
                    assert response.json()["status"] == "pending"

            def all_tried_once() -> bool:
                rows = Notification.objects.values_list("attempts", "lease_until")
                return len(rows) == CALLS and all(tried and lease is None for tried, lease in rows)

            # The receiver is down: every message has failed once, none is delivered.
            wait_until(all_tried_once, 15, "a first, failed attempt of every message")
            server.stop(signal.SIGKILL)
        finally:
            server.stop()
        assert not Notification.objects.filter(status=Notification.Status.DELIVERED).exists()
        committed = {
            f"msg_{pk.hex}": payload
            for pk, payload in Notification.objects.values_list("pk", "payload")
        }
        down[0] = False
        restarted = restart_on(server.port)
        try:
            wait_until(
                lambda: (
                    Notification.objects.filter(status=Notification.Status.DELIVERED).count()
                    == CALLS
                ),
                30,
                "every message delivered after the restart",
            )
        finally:
            restarted.stop()
        got = list(receiver.requests)
    accepted = [g for g in got if g.headers["webhook-id"] in committed]
    assert Counter(g.headers["webhook-id"] for g in accepted).keys() == committed.keys()
    for request in accepted:
        assert request.body.decode() == committed[request.headers["webhook-id"]]
        assert webhook_of(request)["type"] == "call.held"
    assert {json.loads(g.body)["data"]["call"]["status"] for g in accepted} == {"pending"}
