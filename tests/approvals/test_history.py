"""The history: final calls, newest first, filtered, paginated, in a constant number of
queries, and on indexes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.api.errors import QUERY_RANGE
from approvals.models import Agent, Call
from approvals.web.forms import HISTORY_EXPECTED
from approvals.web.history_page import HistoryFilters, history_calls
from approvals.web.querystring import bad_parameter
from approvals.web.views import HISTORY_PAGE_SIZE
from tests.factories import agent_make, user_make

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def agents(db: None) -> tuple[Agent, Agent]:
    return (
        agent_make(),
        agent_make(name="other-bot", principal="dave"),
    )


def make_calls(agent: Agent, count: int, **fields: object) -> list[Call]:
    """``count`` final calls an hour apart, the newest first."""
    values: dict[str, object] = {
        "tool": "pay",
        "principal": agent.principal,
        "status": "approved",
        **fields,
    }
    start = values.pop("start", START)
    assert isinstance(start, datetime)
    calls = [
        Call(
            agent=agent,
            arguments='{"amount": "12.50"}',
            arguments_sha256="0" * 64,
            created_at=start - timedelta(hours=i),
            updated_at=start - timedelta(hours=i),
            **values,
        )
        for i in range(count)
    ]
    return Call.objects.bulk_create(calls)


def viewer() -> Client:
    client = Client()
    client.force_login(user_make(username="victor", decide=False, view=True))
    return client


def listed(client: Client, query: str = "") -> list[str]:
    response = client.get(f"/history/{query}")
    assert response.status_code == 200
    return re.findall(r'<tr id="call-([0-9a-f-]{36})">', response.content.decode())


def ids(calls: list[Call]) -> list[str]:
    return [str(call.pk) for call in calls]


def test_final_calls_newest_first_and_no_pending_ones(agents: tuple[Agent, Agent]) -> None:
    bot, _ = agents
    final = make_calls(bot, 3)
    make_calls(bot, 1, status="pending", expires_at=START + timedelta(hours=1), start=START)
    assert listed(viewer()) == ids(final)


def test_each_row_links_to_its_call_and_shows_status_and_decider(
    agents: tuple[Agent, Agent],
) -> None:
    bot, _ = agents
    alice = user_make(username="alice", decide=False)
    (call,) = make_calls(bot, 1, status="denied", decided_by=alice, decision_comment="no")
    html = viewer().get("/history/").content.decode()
    assert f'href="/calls/{call.pk}/"' in html
    assert '<span class="badge badge-denied">denied</span>' in html
    assert "alice" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?status=denied", "denied"),
        ("?agent={other}", "other"),
        ("?tool=wire", "wire"),
        ("?principal=erin", "erin"),
        ("?since=2025-02-01&until=2025-02-01", "february"),
    ],
)
def test_each_filter(agents: tuple[Agent, Agent], query: str, expected: str) -> None:
    bot, other = agents
    groups = {
        "plain": make_calls(bot, 2),
        "denied": make_calls(bot, 2, status="denied"),
        "other": make_calls(other, 2),
        "wire": make_calls(bot, 2, tool="wire"),
        "erin": make_calls(bot, 2, principal="erin"),
        "february": make_calls(bot, 2, start=datetime(2025, 2, 1, 23, 0, tzinfo=UTC)),
    }
    assert listed(viewer(), query.format(other=other.pk)) == ids(groups[expected])


def test_filters_combine(agents: tuple[Agent, Agent]) -> None:
    bot, other = agents
    make_calls(bot, 2, status="denied")
    make_calls(other, 2, tool="wire")
    wanted = make_calls(other, 1, status="denied", tool="wire")
    assert listed(viewer(), f"?status=denied&agent={other.pk}&tool=wire") == ids(wanted)


def test_a_bad_filter_is_a_400_naming_each_bad_one(agents: tuple[Agent, Agent]) -> None:
    bot, _ = agents
    make_calls(bot, 2)
    client = viewer()
    response = client.get("/history/?status=bogus&since=yesterday&agent=999&tool=pay")
    html = response.content.decode()
    assert response.status_code == 400
    for name in ("status", "agent", "since"):
        assert bad_parameter(name, HISTORY_EXPECTED[name]) in html
    assert "tool" not in html
    before = client.get("/history/?since=2025-03-02&until=2025-03-01")
    assert before.status_code == 400
    assert bad_parameter("until", HISTORY_EXPECTED["until"]) in before.content.decode()


def test_pages_of_fifty_keep_the_filters(agents: tuple[Agent, Agent]) -> None:
    bot, _ = agents
    calls = make_calls(bot, HISTORY_PAGE_SIZE + 5, tool="wire")
    make_calls(bot, 3)
    client = viewer()
    first = client.get("/history/?tool=wire").content.decode()
    assert listed(client, "?tool=wire") == ids(calls[:HISTORY_PAGE_SIZE])
    assert "page 1 of 2" in first
    assert 'href="?tool=wire&amp;page=2"' in first
    assert listed(client, "?tool=wire&page=2") == ids(calls[HISTORY_PAGE_SIZE:])
    past = client.get("/history/?tool=wire&page=3")
    assert past.status_code == 400
    assert bad_parameter("page", QUERY_RANGE.format(low=1, high=2)) in past.content.decode()


def test_an_htmx_request_gets_the_results_only(agents: tuple[Agent, Agent]) -> None:
    bot, _ = agents
    make_calls(bot, 1)
    html = viewer().get("/history/?tool=pay", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="results"')


def test_the_query_count_does_not_grow_with_the_rows(
    agents: tuple[Agent, Agent], django_assert_max_num_queries: object
) -> None:
    bot, other = agents
    alice = user_make(username="alice", decide=False)
    client = viewer()
    queries = ["", f"?agent={other.pk}&status=denied"]
    make_calls(bot, 1)
    make_calls(other, 1, status="denied", decided_by=alice)
    few = {}
    for query in queries:
        with CaptureQueriesContext(connection) as captured:
            assert len(listed(client, query)) >= 1
        few[query] = len(captured)
    make_calls(other, HISTORY_PAGE_SIZE, status="denied", decided_by=alice, tool="wire")
    for query in queries:
        with django_assert_max_num_queries(few[query]):  # type: ignore[operator]
            assert len(listed(client, query)) == HISTORY_PAGE_SIZE


def plan_of(filters: HistoryFilters) -> str:
    """The query plan of a history page. PostgreSQL is told to avoid sequential scans, which
    it prefers on a table this small: the question is whether an index serves the query."""
    sql, params = history_calls(filters=filters)[:50].query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            return " / ".join(row[0].strip() for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return " / ".join(row[-1] for row in cursor.fetchall())


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        (HistoryFilters(), "call_newest"),
        (HistoryFilters(status="denied"), "call_status_newest"),
        (HistoryFilters(tool="pay"), "call_tool_newest"),
        (HistoryFilters(principal="carol"), "call_principal_newest"),
        (HistoryFilters(since=START.date(), until=START.date()), "call_newest"),
        (HistoryFilters(agent=Agent(pk=1)), "call_agent_newest"),
    ],
)
def test_the_history_queries_use_an_index(
    agents: tuple[Agent, Agent], filters: HistoryFilters, index: str
) -> None:
    plan = plan_of(filters)
    if connection.vendor == "postgresql":
        assert "Seq Scan on approvals_call" not in plan
        assert "Index Scan" in plan
        return
    assert f"approvals_call USING INDEX {index}" in plan
    if index != "call_agent_newest":  # (agent, -created_at): the id tie-break is sorted
        assert "TEMP B-TREE" not in plan  # read in order from the index, not sorted whole
