"""The approver's queue across two server workers on one PostgreSQL and one Redis: a page
served by worker A updates live for calls submitted and decided on worker B."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.browser.conftest import PASSWORD, Browsing, agent_client, wait_live
from tests.browser.test_approver_ui import submit
from tests.factories import rule_make, user_make
from tests.live import Approver, LiveServer
from tests.scale.servers import is_postgresql, redis_reachable, workers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_pair(transactional_db: None) -> Iterator[list[LiveServer]]:
    if not is_postgresql():
        pytest.skip("two workers need PostgreSQL (DATABASE_URL)")
    if not redis_reachable(settings.REDIS_URL):
        pytest.skip("two workers need a reachable REDIS_URL")
    with workers(2, {"REDIS_URL": str(settings.REDIS_URL)}) as pair:
        yield pair


@pytest.fixture
def server(worker_pair: list[LiveServer]) -> LiveServer:
    """Worker A: the one the browser talks to (the ``browsing`` fixture uses it)."""
    return worker_pair[0]


def test_the_queue_on_worker_a_shows_and_drops_calls_handled_on_worker_b(
    browsing: Browsing, worker_pair: list[LiveServer]
) -> None:
    a, b = worker_pair
    user_make(username="alice", password=PASSWORD)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    page = browsing.logged_in("alice")
    assert page.url.startswith(a.url)
    wait_live(page)

    call_id = submit(agent_client(b, "billing-bot"), "pay", {"amount": "4321.00"})
    row = page.locator(f"#call-{call_id}")
    expect(row).to_contain_text("USD 4,321.00")
    expect(page.locator("#mine-count")).to_have_text("1")

    decider = Approver(b, "alice", PASSWORD)
    try:
        assert decider.decide(call_id, approve=True, comment="approved on B") == 303
    finally:
        decider.close()
    expect(row).to_have_count(0)
    expect(page.locator("#mine-count")).to_have_text("0")
