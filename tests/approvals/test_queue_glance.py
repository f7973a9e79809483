"""The queue at a glance: an amount that could not be read says why, in a few words (the call
page has the full reason), and whether an agent is waiting for each call."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.test import Client

from approvals.models import Agent, Call
from approvals.realtime import presence
from approvals.realtime.presence import MemoryPresence, agent_key, call_key
from tests.factories import call_make, rule_make, user_make

RULE = "big: pay arg=amount currency=currency max USD 500.00, EUR 400.00 -> gate"
UNREADABLE = {
    ("10.00", "usd"): "not a currency code",
    ("10.00", "XAU"): "no limit in XAU",
    ("1e3", "USD"): "not a plain decimal",
    ("12.345", "USD"): "too many decimals for USD",
    ("-5", "USD"): "negative",
}


@pytest.fixture
def memory() -> Iterator[MemoryPresence]:
    backend = MemoryPresence()
    old = presence.backend_set(backend)
    yield backend
    presence.backend_set(old)


def queue_html(username: str = "alice") -> str:
    client = Client()
    client.force_login(user_make(username=username))
    return client.get("/").content.decode()


def row_of(page: str, call: Call) -> str:
    match = re.search(rf'<li id="call-{call.pk}".*?</li>', page, re.S)
    assert match is not None, f"no row for {call.pk}"
    return html.unescape(re.sub(r"<[^>]+>", "", match[0]))


@pytest.mark.django_db
def test_each_unreadable_amount_shows_its_own_short_reason(memory: MemoryPresence) -> None:
    rule_make(line=RULE)
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    calls = {
        key: call_make(agent=agent, arguments=json.dumps({"amount": key[0], "currency": key[1]}))
        for key in UNREADABLE
    }
    readable = call_make(agent=agent, arguments='{"amount": "600.00", "currency": "EUR"}')
    assert {call.status for call in [*calls.values(), readable]} == {"pending"}

    page = queue_html()
    shown = {}
    for key, call in calls.items():
        row = " ".join(row_of(page, call).split())
        found = re.search(r"amount not readable: (.*?) bot for", row)
        assert found is not None, row
        shown[key] = found[1]
    assert shown == UNREADABLE
    assert len(set(shown.values())) == len(UNREADABLE)
    assert "EUR 600.00" in row_of(page, readable)
    assert "amount not readable" not in row_of(page, readable)

    # The call page keeps the full reason.
    client = Client()
    client.force_login(user_make(username="bob"))
    full = client.get(f"/calls/{calls[('10.00', 'XAU')].pk}/").content.decode()
    assert "the currency is not one this rule has a limit in" in full


@pytest.mark.django_db
def test_rows_and_the_call_page_say_whether_an_agent_waits(memory: MemoryPresence) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    other = Agent.objects.create(name="other", principal="carol", mode="danger_full_access")
    never, by_call, by_stream, left = (
        call_make(agent=a, arguments='{"amount": "600.00"}') for a in (agent, agent, other, agent)
    )

    async def waiters() -> None:  # what the sockets and long-polls do, on the event loop
        presence.waiter_enter(call_key(by_call.pk))
        presence.waiter_enter(agent_key(other.pk))
        presence.waiter_enter(call_key(left.pk))
        presence.waiter_leave(call_key(left.pk))

    asyncio.run(waiters())
    left_at = datetime.fromtimestamp(memory.left[call_key(left.pk)], tz=UTC)

    page = queue_html()
    assert "no agent has waited" in row_of(page, never)
    assert "agent waiting" in row_of(page, by_call)
    assert "agent waiting" in row_of(page, by_stream)
    assert f"no agent waiting since {left_at:%H:%M}" in row_of(page, left)

    client = Client()
    client.force_login(user_make(username="bob"))
    call_page = client.get(f"/calls/{by_call.pk}/").content.decode()
    assert '<span class="waiting waiting-yes">agent waiting</span>' in call_page
