"""The insights page: who may see it, and its tables and charts against a history made
through the services, each number worked out here from the rows themselves."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, Call, InsightsDay, LedgerEntry, LedgerReservation
from approvals.selectors.caps import held_by
from approvals.services.decisions import call_decide
from approvals.services.lifecycle import calls_expire_due
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

RULES = (
    "big: pay arg=amount max USD 100.00 -> gate",
    "wire-cap: wire arg=amount max USD 1000.00 -> gate treasury",
    "no-crypto: buy_crypto arg=amount max USD 10.00 -> refuse",
    "spent: pay arg=amount sum USD 2000.00 -> gate",
)
VERDICTS = ("allowed", "refused", "pending", "approved", "denied", "expired", "cancelled")


class Tables(HTMLParser):
    """Every table of a page by its id: its body's rows, each cell's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.current: str | None = None
        self.in_body = False
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.current = dict(attrs).get("id") or ""
            self.tables[self.current] = []
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body and self.current is not None:
            self.tables[self.current].append([])
        elif tag in {"td", "th"} and self.in_body:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in {"td", "th"} and self.cell is not None and self.current is not None:
            self.tables[self.current][-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tbody":
            self.in_body = False
        elif tag == "table":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


@dataclass
class Page:
    tables: dict[str, list[list[str]]]
    charts: dict[str, dict[str, object]]


def page(client: Client, query: str = "") -> Page:
    response = client.get(f"/insights/{query}")
    assert response.status_code == 200
    text = response.content.decode()
    parser = Tables()
    parser.feed(text)
    start = text.index('<script id="insights-charts" type="application/json">')
    data = text[text.index(">", start) + 1 : text.index("</script>", start)]
    return Page(parser.tables, json.loads(data))


@dataclass
class History:
    now: datetime
    alice: User
    bob: User


def _decide(call: Call, user: User, *, approve: bool, after: timedelta) -> None:
    call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment="",
        arguments_sha256=call.arguments_sha256,
        now=call.created_at + after,
    )


@pytest.fixture
def history(db: None) -> History:
    """Calls over the last 60 days: allowed, refused, approved and denied after various
    waits, one expired, one still pending; at the default gate and at ``treasury``."""
    for line in RULES:
        rule_make(line=line)
    gate_make(name="treasury", timeout_seconds=7200)
    alice, bob = user_make(username="alice"), user_make(username="bob")
    agent = agent_make()
    now = timezone.now()

    def at(days: int, minutes: int = 1) -> datetime:
        return now - timedelta(days=days, minutes=minutes)

    call_make(agent=agent, arguments=payment("5.00"), now=at(0, 90))
    _decide(
        call_make(agent=agent, arguments=payment("150.00"), now=at(0, 60)),
        alice,
        approve=True,
        after=timedelta(minutes=2),
    )
    _decide(
        call_make(agent=agent, arguments=payment("200.00"), now=at(0, 50)),
        bob,
        approve=False,
        after=timedelta(minutes=10),
    )
    wire = call_make(agent=agent, tool="wire", arguments=payment("5000.00"), now=at(3))
    _decide(wire, alice, approve=True, after=timedelta(hours=1))
    lapsed = call_make(agent=agent, arguments=payment("300.00"), now=at(3, 30))
    assert lapsed.expires_at is not None
    calls_expire_due(now=lapsed.expires_at)
    _decide(
        call_make(agent=agent, arguments=payment("120.00"), now=at(20)),
        bob,
        approve=True,
        after=timedelta(minutes=30),
    )
    call_make(agent=agent, tool="buy_crypto", arguments=payment("50.00"), now=at(20, 5))
    _decide(
        call_make(agent=agent, arguments=payment("400.00"), now=at(60)),
        alice,
        approve=False,
        after=timedelta(minutes=5),
    )
    call_make(agent=agent, arguments=payment("1.00"), now=at(60, 3))
    call_make(agent=agent, arguments=payment("700.00"), now=at(0, 5))  # still pending
    statuses = Counter(Call.objects.values_list("status", flat=True))
    assert statuses == {
        "allowed": 2,
        "refused": 1,
        "approved": 3,
        "denied": 2,
        "expired": 1,
        "pending": 1,
    }
    return History(now, alice, bob)


def viewer() -> Client:
    client = Client()
    person = User.objects.filter(username="victor").first()
    client.force_login(person or user_make(username="victor", decide=False, view=True))
    return client


def _start(now: datetime, days: int) -> datetime:
    first = now.astimezone(UTC).date() - timedelta(days=days - 1)
    return datetime(first.year, first.month, first.day, tzinfo=UTC)


def _days(now: datetime, days: int) -> list[date]:
    first = _start(now, days).date()
    return [first + timedelta(days=i) for i in range(days)]


def _nearest_rank(values: list[int], part: int, whole: int) -> int:
    return sorted(values)[math.ceil(len(values) * part / whole) - 1]


def _seconds_text(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


@pytest.mark.parametrize("days", [7, 30, 90])
def test_every_table_matches_the_database(history: History, days: int) -> None:
    shown = page(viewer(), f"?days={days}")
    start = _start(history.now, days)
    # The settled days were kept by that load and read back; today was counted afresh.
    assert InsightsDay.objects.filter(day__gte=start.date()).exists()
    calls = list(Call.objects.filter(created_at__gte=start))

    per_day = Counter((c.created_at.astimezone(UTC).date(), c.status) for c in calls)
    expected_days = [
        [
            day.isoformat(),
            *(str(per_day[day, s]) for s in VERDICTS),
            str(sum(per_day[day, s] for s in VERDICTS)),
        ]
        for day in _days(history.now, days)
    ]
    assert shown.tables["table-calls"] == expected_days

    holds: Counter[str] = Counter(name for c in calls if c.gates for name in held_by(c))
    expected_holds = sorted(holds.items(), key=lambda item: (-item[1], item[0]))
    assert shown.tables["table-holds"] == [[name, str(n)] for name, n in expected_holds]

    waits: defaultdict[str, list[int]] = defaultdict(list)
    for c in calls:
        if c.status in {"approved", "denied"} and c.decided_at is not None:
            for gate in c.gates:
                waits[gate].append(int((c.decided_at - c.created_at).total_seconds()))
    expected_times = [
        [
            gate or "(default gate)",
            str(len(waits[gate])),
            _seconds_text(_nearest_rank(waits[gate], 1, 2)),
            _seconds_text(_nearest_rank(waits[gate], 9, 10)),
        ]
        for gate in sorted(waits)
    ]
    assert shown.tables["table-times"] == expected_times

    expired = Counter(
        c.decided_at.astimezone(UTC).date()
        for c in Call.objects.filter(status="expired", decided_at__gte=start)
        if c.decided_at is not None
    )
    assert shown.tables["table-expiries"] == [
        [day.isoformat(), str(expired[day])] for day in _days(history.now, days)
    ]

    given: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for approval in Approval.objects.filter(created_at__gte=start).select_related("user"):
        given[approval.user.username][0 if approval.approve else 1] += 1
    expected_people = sorted(given.items(), key=lambda item: (-sum(item[1]), item[0]))
    assert shown.tables["table-approvers"] == [
        [name, str(a), str(d), str(a + d)] for name, (a, d) in expected_people
    ]

    # The charts draw the tables' numbers.
    calls_chart = shown.charts["calls"]
    assert calls_chart["labels"] == [row[0] for row in expected_days]
    assert [s["values"] for s in calls_chart["series"]] == [  # type: ignore[attr-defined]
        [int(row[1 + i]) for row in expected_days] for i in range(len(VERDICTS))
    ]
    assert shown.charts["holds"]["series"][0]["values"] == [n for _, n in expected_holds]  # type: ignore[index]


def test_the_periods_count_only_their_days(history: History) -> None:
    totals = {
        days: sum(int(row[-1]) for row in page(viewer(), f"?days={days}").tables["table-calls"])
        for days in (7, 30, 90)
    }
    assert totals == {7: 6, 30: 8, 90: 10}
    assert len(page(viewer()).tables["table-calls"]) == 30  # the default period


def test_the_ledgers_nearest_their_limits_match_the_database(history: History) -> None:
    shown = page(viewer()).tables["table-ledgers"]
    spent = sum(e.minor for e in LedgerEntry.objects.filter(ledger__rule="spent", voided_at=None))
    reserved = sum(r.minor for r in LedgerReservation.objects.filter(ledger__rule="spent"))
    assert spent > 0
    assert reserved > 0
    percent = round(100 * (spent + reserved) / 200000, 1)
    assert shown == [
        [
            "spent",
            "—",
            f"USD {spent / 100:,.2f}",
            f"USD {reserved / 100:,.2f}",
            "USD 2,000.00",
            f"{percent} %",
        ]
    ]


def test_a_new_decision_shows_at_once(history: History) -> None:
    client = viewer()
    before = page(client, "?days=7").tables["table-approvers"]
    held = Call.objects.get(status="pending")
    call_decide(
        call_id=held.pk,
        user=history.bob,
        approve=True,
        comment="",
        arguments_sha256=held.arguments_sha256,
    )
    after = page(client, "?days=7").tables["table-approvers"]
    assert before != after
    bob = next(row for row in after if row[0] == "bob")
    assert bob[1:] == ["1", "1", "2"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("decide", "view", "staff", "status"),
    [
        (True, False, False, 200),
        (False, True, False, 200),
        (False, False, True, 200),
        (False, False, False, 403),
    ],
)
def test_approvers_viewers_and_staff_may_see_it(
    decide: bool, view: bool, staff: bool, status: int
) -> None:
    user = user_make(username="someone", decide=decide, view=view)
    User.objects.filter(pk=user.pk).update(is_staff=staff)
    client = Client()
    client.force_login(user)
    assert client.get("/insights/").status_code == status


@pytest.mark.django_db
def test_a_visitor_is_sent_to_log_in() -> None:
    response = Client().get("/insights/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["?days=5", "?days=7&days=30", "?days=<b>x</b>"])
def test_a_period_it_cannot_use_is_a_400_that_echoes_nothing(query: str) -> None:
    response = viewer().get(f"/insights/{query}")
    assert response.status_code == 400
    assert b"<b>x</b>" not in response.content
    assert b"days" in response.content


@pytest.mark.django_db
def test_an_empty_history_shows_empty_tables_and_says_so() -> None:
    shown = viewer().get("/insights/?days=7").content.decode()
    assert "No call was held in this period." in shown
    assert "Nobody decided a held call in this period." in shown
    parser = Tables()
    parser.feed(shown)
    assert [row[-1] for row in parser.tables["table-calls"]] == ["0"] * 7


@pytest.mark.django_db
def test_the_nav_links_to_it() -> None:
    shown = viewer().get("/insights/").content.decode()
    assert '<a href="/insights/" aria-current="page">Insights</a>' in shown
