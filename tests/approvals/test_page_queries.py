"""The approver's pages cost a fixed number of queries, however many rows they show.

Each test reads a page with a few rows and again with many, under the same bound. The rows are
made through the services, so they carry what real ones do: findings from caps and from the
permission mode, several gates, approvals from two approvers, ledger totals, audit entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from approvals.models import Agent, Call, Ledger, LedgerEntry
from approvals.realtime.consumers import _call_html, _queue_push, _session_expiry
from approvals.selectors.ledgers import ledger_spent
from approvals.selectors.rules import stored_rule
from approvals.services.agents import agent_create_or_update
from approvals.services.decisions import call_decide
from approvals.services.ledgers import ledger_entry_void
from approvals.services.lifecycle import call_cancel, call_extend, calls_expire_due
from approvals.services.rules import gate_ensure
from approvals.web.call_page import call_page
from approvals.web.views import HISTORY_PAGE_SIZE
from capcore.caps import digest_key
from tests.factories import call_make, gate_make, rule_make, user_make

# What each page costs with a few rows: four to know who asks (the session, the user, their
# own and their groups' permissions), then the page's own reads. A query per row, approval,
# gate, cap or audit entry breaks these bounds at forty.
# The queue: the gates and the person's groups, both counts, each section's rows, the rules.
QUEUE_QUERIES = 10
HISTORY_QUERIES = 8  # the filter form's list of agents included; the partial has no form
HISTORY_PARTIAL_QUERIES = 7
AGENT_FILTER_QUERIES = 1  # the chosen agent is looked up
# With approvals (their users) and sum rules (ledgers, then their totals and reservations).
CALL_QUERIES = 16
QUEUE_PUSH_QUERIES = 9
# Before each push, once per session: the session, the person, their own and their groups'
# permissions, its expiry.
SESSION_CHECK_QUERIES = 5
CALL_PUSH_QUERIES = 15

FEW, MANY = 6, 40

RULES = (
    "big: pay arg=amount max USD 500.00 -> gate",
    "huge: pay arg=amount max USD 1000.00 -> gate treasury",
    "daily: pay arg=amount sum USD 100000.00 per day by principal -> gate",
    "weekly: pay arg=amount sum USD 500000.00 per week -> gate",
    "monthly: pay arg=amount sum USD 900000.00 per month -> gate",
    "wire-cap: wire arg=amount.value currency=amount.currency max USD 100.00, EUR 90.00"
    " -> gate treasury",
    "contract: sign arg=value max USD 1000.00 -> gate legal",
    "no-crypto: buy_crypto arg=amount max USD 50.00 -> refuse",
)

# The pending call of each round, in turn: (tool, arguments).
HELD = (
    ("pay", '{"amount": "1250.00"}'),  # over big and huge: the default gate and treasury
    ("pay", '{"amount": "1500.00"}'),  # the same, then approved by bob and alice: 2 of 3
    ("wire", '{"amount": {"value": "250.00", "currency": "EUR"}}'),  # treasury
    ("sign", '{"value": 5000}'),  # legal: alice may only read it
    ("lookup", '{"q": "<b>x</b>"}'),  # no rule: held by the prompting agent's mode
)


@dataclass
class World:
    agents: tuple[Agent, ...]  # caps decide their calls
    prompting: Agent  # every call it makes is held by its mode
    alice: User  # the reader: decides at the default and treasury gates, not at legal
    bob: User
    rounds: int = 0
    pending: list[Call] = field(default_factory=list)


@pytest.fixture
def world(db: None) -> World:
    for line in RULES:
        rule_make(line=line)
    treasury, legal = Group.objects.create(name="treasury"), Group.objects.create(name="legal")
    gate_make(name="treasury", group=treasury, required_approvals=3)
    gate_make(name="legal", group=legal)
    gate_ensure(name="")
    agents = tuple(
        agent_create_or_update(name=f"agent-{k}", principal=f"principal-{k}", mode="allow")
        for k in range(3)
    )
    prompting = agent_create_or_update(name="asker", principal="principal-a", mode="prompt")
    alice = user_make(username="alice", groups=[treasury])
    return World(agents, prompting, alice, user_make(username="bob", groups=[treasury]))


def submit(agent: Agent, tool: str, arguments: str, *, at: datetime | None = None) -> Call:
    return call_make(agent=agent, tool=tool, arguments=arguments, context="pays an invoice", now=at)


def decide(call: Call, user: User, *, approve: bool = True, comment: str = "") -> None:
    call_decide(
        call_id=call.pk,
        user=user,
        approve=approve,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
    )


def fill(world: World, rounds: int) -> None:
    """``rounds`` more pending calls and as many final ones, of every kind in turn."""
    for i in range(world.rounds, world.rounds + rounds):
        agent = world.agents[i % len(world.agents)]
        tool, arguments = HELD[i % len(HELD)]
        held = submit(world.prompting if tool == "lookup" else agent, tool, arguments)
        assert held.status == "pending"
        if i % len(HELD) == 1:
            decide(held, world.bob)
            decide(held, world.alice, comment="fine by me")
        world.pending.append(held)
        kind = i % 6
        if kind == 0:
            assert submit(agent, "pay", '{"amount": "12.50"}').status == "allowed"
        elif kind == 1:
            decide(submit(agent, "pay", '{"amount": "600.00"}'), (world.alice, world.bob)[i % 2])
        elif kind == 2:
            decide(submit(agent, "pay", '{"amount": "700.00"}'), world.bob, approve=False)
        elif kind == 3:
            assert submit(agent, "buy_crypto", '{"amount": 100}').status == "refused"
        elif kind == 4:
            held = submit(agent, "wire", '{"amount": {"value": "95.00", "currency": "EUR"}}')
            call_cancel(agent=agent, call_id=held.pk)
        else:
            submit(agent, "pay", '{"amount": "800.00"}', at=timezone.now() - timedelta(hours=2))
            assert calls_expire_due() == 1
    world.rounds += rounds


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def session_key(user: User) -> str:
    key = browser(user).session.session_key
    assert key is not None
    return key


def html_of(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def queue_rows(html: str) -> list[str]:
    return re.findall(r'<li id="call-([0-9a-f-]{36})"', html)


def history_rows(html: str) -> list[str]:
    return re.findall(r'<tr id="call-([0-9a-f-]{36})">', html)


# --- the queue --------------------------------------------------------------------------------


def test_the_queue(world: World, django_assert_max_num_queries: DjangoAssertNumQueries) -> None:
    client = browser(world.alice)
    for rounds in (FEW, MANY - FEW):
        fill(world, rounds)
        with django_assert_max_num_queries(QUEUE_QUERIES):
            html = html_of(client, "/")
        assert sorted(queue_rows(html)) == sorted(str(call.pk) for call in world.pending)
    assert "you decided" in html
    assert "2 of 3" in html
    assert "EUR 250.00" in html


def test_the_queue_partial(
    world: World, django_assert_max_num_queries: DjangoAssertNumQueries
) -> None:
    client = browser(world.alice)
    for rounds in (FEW, MANY - FEW):
        fill(world, rounds)
        with django_assert_max_num_queries(QUEUE_QUERIES):
            html = html_of(client, "/", HX_Request="true")
        assert len(queue_rows(html)) == len(world.pending)


@pytest.mark.django_db(transaction=True)
def test_the_queue_socket_render(
    world: World, django_assert_max_num_queries: DjangoAssertNumQueries
) -> None:
    key = session_key(world.alice)
    for rounds in (FEW, MANY - FEW):
        fill(world, rounds)
        with django_assert_max_num_queries(SESSION_CHECK_QUERIES):
            expires, _ = async_to_sync(_session_expiry)(key, world.alice.pk)
        assert expires is not None
        with django_assert_max_num_queries(QUEUE_PUSH_QUERIES):
            pushed = _queue_push(world.alice.pk)
        assert pushed is not None
        assert len(queue_rows(pushed.whole())) == len(world.pending)


# --- the history ------------------------------------------------------------------------------

FILTERS = [
    ("", {}),
    ("status=denied", {"status": "denied"}),
    ("agent={agent}", {"agent__name": "agent-1"}),
    ("tool=pay", {"tool": "pay"}),
    ("principal=principal-2", {"principal": "principal-2"}),
    ("since={yesterday}&until={tomorrow}", {}),
    (
        "status=approved&agent={agent}&tool=pay&since={yesterday}",
        {"status": "approved", "agent__name": "agent-1", "tool": "pay"},
    ),
]


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "partial"])
@pytest.mark.parametrize(("query", "lookups"), FILTERS)
def test_the_history(
    world: World,
    django_assert_max_num_queries: DjangoAssertNumQueries,
    query: str,
    lookups: dict[str, str],
    htmx: bool,
) -> None:
    today = timezone.now().date()
    url = "/history/?" + query.format(
        agent=world.agents[1].pk,
        yesterday=today - timedelta(days=1),
        tomorrow=today + timedelta(days=1),
    )
    headers = {"HX_Request": "true"} if htmx else {}
    bound = HISTORY_PARTIAL_QUERIES if htmx else HISTORY_QUERIES
    if "agent=" in query:
        bound += AGENT_FILTER_QUERIES
    client = browser(world.alice)
    shown = []
    for rounds in (FEW, MANY - FEW):
        fill(world, rounds)
        with django_assert_max_num_queries(bound):
            html = html_of(client, url, **headers)
        matching = Call.objects.exclude(status="pending").filter(**lookups).count()
        shown.append(len(history_rows(html)))
        assert shown[-1] == min(matching, HISTORY_PAGE_SIZE)
    assert shown[0] < shown[1]


def test_a_late_history_page(
    world: World, django_assert_max_num_queries: DjangoAssertNumQueries
) -> None:
    client = browser(world.alice)
    fill(world, MANY + HISTORY_PAGE_SIZE // 2)
    with django_assert_max_num_queries(HISTORY_QUERIES):
        html = html_of(client, "/history/?page=2")
    assert len(history_rows(html)) == world.rounds - HISTORY_PAGE_SIZE


# --- the call page ----------------------------------------------------------------------------


def pages(world: World) -> list[Call]:
    """A held call with the least on its page, one with the most, and final ones."""
    fill(world, FEW)
    simple = next(call for call in world.pending if call.agent_id == world.prompting.pk)
    rich = next(call for call in world.pending if call.tool == "pay" and call.approvals.count())
    call_extend(call_id=rich.pk, user=world.alice)
    finals = Call.objects.exclude(status="pending").order_by("status", "created_at")
    return [simple, rich, *finals]


def test_the_call_page(world: World, django_assert_max_num_queries: DjangoAssertNumQueries) -> None:
    client = browser(world.alice)
    for call in pages(world):
        with django_assert_max_num_queries(CALL_QUERIES):
            html_of(client, f"/calls/{call.pk}/")
        with django_assert_max_num_queries(CALL_QUERIES):
            html_of(client, f"/calls/{call.pk}/", HX_Request="true")


def test_the_richest_call_page_shows_every_row(world: World) -> None:
    _, rich, *_ = pages(world)
    html = html_of(browser(world.alice), f"/calls/{rich.pk}/")
    # Its principal's day holds one approved 600.00; the week and month also an allowed 12.50,
    # and the two other held payments of 1,250.00 (other principals) reserve there.
    spent = re.findall(r'data-label="Spent now"><span>([^<]+)</span>', html)
    reserved = re.findall(r'data-label="Reserved"><span>([^<]+)</span>', html)
    after = re.findall(r'data-label="After approval"><strong>([^<]+)</strong>', html)
    assert spent == ["USD 600.00", "USD 612.50", "USD 612.50"]
    assert reserved == ["USD 0.00", "USD 2,500.00", "USD 2,500.00"]
    assert after == ["USD 2,100.00", "USD 4,612.50", "USD 4,612.50"]
    assert re.findall(r'<li class="yes">approved by (\w+)', html) == ["bob", "alice"]
    assert re.findall(r'<tr><th scope="row">(.*?)</th>', html) == [
        "default",
        "<code>treasury</code>",
    ]
    # Two approvals of the three treasury needs: each recorded, the call still pending.
    assert re.findall(r'<span class="action">([^<]+)</span>[^:]*(?:: <q>([^<]*)</q>)?', html) == [
        ("call pending", ""),
        ("call pending", "approval recorded (1 of 3)"),
        ("call pending", "approval recorded (2 of 3): fine by me"),
        ("call extended", ""),
    ]


def test_the_totals_shown_are_the_ledgers_totals(world: World) -> None:
    """Read for all sum rules at once, each total is still ``ledger_spent`` of its ledger:
    rolling, calendar and all-time windows, keys, voided entries, a rolling window's edge."""
    lines = {
        "rolling": "rolling: pay arg=amount sum USD 100000.00 per 24h -> gate",
        "ever": "ever: pay arg=amount sum USD 100000.00 -> gate",
        "by-payee": "by-payee: pay arg=amount sum USD 100000.00 per week by arg=payee -> gate",
    }
    for line in lines.values():
        rule_make(line=line)
    agent, now = world.agents[0], timezone.now()
    for hours, payee in ((24, "ada"), (23, "ada"), (20, "ada"), (1, "bob"), (0, "ada")):
        arguments = f'{{"amount": "1{hours}.00", "payee": "{payee}"}}'
        assert submit(agent, "pay", arguments, at=now - timedelta(hours=hours)).status == "allowed"
    for refunded in LedgerEntry.objects.filter(call__arguments__contains='"120.00"'):
        ledger_entry_void(entry_id=refunded.pk, reason="refunded", by_user=world.alice)
    held = submit(agent, "pay", '{"amount": "1250.00", "payee": "ada"}')
    page = call_page(call_id=held.pk, user=world.alice, now=now)
    assert page is not None
    keys = {"by-payee": digest_key("ada"), "daily": digest_key(agent.principal)}
    shown = {cap.rule: cap.spent for cap in page.caps if cap.kind == "sum"}
    assert set(shown) == {"daily", "weekly", "monthly", *lines}
    for name, spent in shown.items():
        ledger = Ledger.objects.get(rule=name, key_digest=keys.get(name, ""))
        rule = stored_rule(lines.get(name) or next(r for r in RULES if r.startswith(name)))
        assert rule is not None
        assert spent is not None
        assert spent.minor == ledger_spent(ledger=ledger, window=rule.window, now=now), name
    assert shown["rolling"] is not None
    assert shown["rolling"].minor == 12300 + 1100 + 1000  # not 24h ago, nor the voided one


@pytest.mark.django_db(transaction=True)
def test_the_call_page_socket_render(
    world: World, django_assert_max_num_queries: DjangoAssertNumQueries
) -> None:
    for call in pages(world):
        with django_assert_max_num_queries(CALL_PUSH_QUERIES):
            html = _call_html(world.alice.pk, call.pk)
        assert html
