"""The approver's pages through the test client: access, the queue, the call page, safety."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.template import Context, Template
from django.test import Client
from django.utils import timezone

import capcore
from approvals.models import Agent, Approval, Call, Gate
from approvals.selectors.deciders import decidable_call_ids
from approvals.services.decisions import call_decide
from approvals.templatetags.clock import time_left
from approvals.templatetags.money import money
from approvals.web.csp import POLICY
from approvals.web.queue_page import QUEUE_SECTION_LIMIT, queue_for_user
from tests.factories import agent_make, call_make, payment, rule_make, user_make

XSS = "<img src=x onerror=alert(1)>"
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
OFF_SITE = re.compile(r"""\b(?:src|href)\s*=\s*["']?(?:[a-z][a-z0-9+.-]*:)?//""", re.IGNORECASE)


@pytest.fixture
def agent(db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    return agent_make()


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def html_of(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


# --- access -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/", "/history/"])
def test_every_page_needs_a_login(db: None, url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("url", ["/", "/history/"])
def test_a_user_without_either_permission_gets_403(db: None, url: str) -> None:
    assert browser(user_make(username="nobody", decide=False)).get(url).status_code == 403


@pytest.mark.parametrize("permission", ["view_call", "decide_call"])
def test_either_permission_opens_the_pages(db: None, permission: str) -> None:
    decide, view = permission == "decide_call", permission == "view_call"
    client = browser(user_make(username="someone", decide=decide, view=view))
    assert client.get("/").status_code == 200
    assert client.get("/history/").status_code == 200


def test_login_page_and_logout(db: None) -> None:
    user_make(username="alice")
    client = Client()
    page = html_of(client, "/accounts/login/")
    assert 'name="username"' in page
    assert 'name="password"' in page
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw"})
    assert response.status_code == 302
    assert response["Location"] == "/"  # not /accounts/profile/, which does not exist
    assert client.get("/").status_code == 200
    logged_out = client.post("/accounts/logout/")
    assert logged_out.status_code == 200
    assert "Logged out" in logged_out.content.decode()
    assert client.get("/").status_code == 302


# --- the queue --------------------------------------------------------------------------------


def test_the_queue_lists_decidable_calls_oldest_first_then_the_others(agent: Agent) -> None:
    older = call_make(agent=agent, arguments=payment("1250.00"))
    newer = call_make(agent=agent, arguments=payment("600.00"))
    own = call_make(agent=agent, arguments=payment("700.00"), principal="alice")
    call_make(agent=agent, arguments=payment("10.00"))  # allowed: not in the queue
    alice = user_make(username="alice")
    page = html_of(browser(alice), "/")
    mine = page[page.index('id="mine"') : page.index('id="others-title"')]
    others = page[page.index('id="others"') :]
    assert mine.index(f'id="call-{older.pk}"') < mine.index(f'id="call-{newer.pk}"')
    assert f'id="call-{own.pk}"' in others  # nobody approves their own request
    assert f'href="/calls/{older.pk}/"' in mine
    assert "USD 1,250.00" in mine
    assert '<code class="rule">big</code>' in mine
    assert page.count('<li id="call-') == 3


def test_a_viewer_sees_every_pending_call_read_only(agent: Agent) -> None:
    call = call_make(agent=agent, arguments=payment("1250.00"))
    page = html_of(browser(user_make(username="victor", decide=False, view=True)), "/")
    assert 'id="mine"' not in page
    assert f'id="call-{call.pk}" class="row row-readonly"' in page


def test_a_call_held_at_another_groups_gate_is_read_only(agent: Agent) -> None:
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    Gate.objects.filter(name="treasury").update(group=Group.objects.create(name="treasury"))
    call = call_make(agent=agent, arguments=payment("200.00"), tool="wire")
    alice = user_make(username="alice")
    queue = queue_for_user(user=alice)
    assert [row.id for row in queue.others] == [call.pk]
    alice.groups.add(Group.objects.get(name="treasury"))
    queue = queue_for_user(user=User.objects.get(pk=alice.pk))
    assert [row.id for row in queue.mine] == [call.pk]


def test_a_call_i_approved_waits_among_the_others_with_its_progress(agent: Agent) -> None:
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    Gate.objects.filter(name="treasury").update(required_approvals=2)
    call = call_make(agent=agent, arguments=payment("200.00"), tool="wire")
    alice = user_make(username="alice")
    call_decide(
        call_id=call.pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
    )
    queue = queue_for_user(user=alice)
    (row,) = queue.others
    assert (row.decided_by_me, row.approvals, row.required) == (True, 1, 2)
    page = html_of(browser(alice), "/")
    assert "1 of 2" in page
    assert "you decided" in page


def approve(call: Call, user: User) -> None:
    call_decide(
        call_id=call.pk, user=user, approve=True, comment="", arguments_sha256=call.arguments_sha256
    )


def section_rows(page: str, section: str) -> list[str]:
    """The call ids of one section (``mine`` or ``others``), in the page's order."""
    start = page.index(f'id="{section}"')
    return re.findall(r'<li id="call-([0-9a-f-]{36})"', page[start : page.index("</ol>", start)])


def test_a_long_queue_shows_each_sections_oldest_rows_and_counts_them_all(agent: Agent) -> None:
    treasury = Group.objects.create(name="treasury")
    rule_make(line="huge: pay arg=amount max USD 1000.00 -> gate treasury")
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    Gate.objects.filter(name="treasury").update(group=treasury)
    Gate.objects.filter(name="").update(required_approvals=2)
    alice, bob = user_make(username="alice"), user_make(username="bob")
    mine: list[Call] = []
    others: list[Call] = []
    for i in range(QUEUE_SECTION_LIMIT + 3):
        call = call_make(agent=agent, arguments=payment("600.00"))
        if i % 5 == 0:
            approve(call, bob)  # one of two: still alice's to decide
        mine.append(call)
        call_make(agent=agent, arguments=payment("10.00"))  # allowed: never in the queue
        if i % 4 == 0:
            others.append(call_make(agent=agent, arguments=payment("700.00"), principal="alice"))
        elif i % 4 == 1:
            # held at treasury as well
            others.append(call_make(agent=agent, arguments=payment("1250.00")))
        elif i % 4 == 2:
            # treasury only
            others.append(call_make(agent=agent, arguments=payment("200.00"), tool="wire"))
        else:
            others.append(call := call_make(agent=agent, arguments=payment("800.00")))
            approve(call, alice)  # waits for a second approver
    queue = queue_for_user(user=alice)

    assert (queue.mine_count, queue.others_count) == (len(mine), len(others))
    assert [row.id for row in queue.mine] == [call.pk for call in mine[:QUEUE_SECTION_LIMIT]]
    assert [row.id for row in queue.others] == [call.pk for call in others[:QUEUE_SECTION_LIMIT]]
    # The database's choice is the rule that deciding follows.
    pending = list(Call.objects.filter(status="pending"))
    decided = set(Approval.objects.filter(user=alice).values_list("call_id", flat=True))
    assert {call.pk for call in mine} == decidable_call_ids(user=alice, calls=pending) - decided
    assert all(row.may_decide and not row.decided_by_me for row in queue.mine)
    assert [(row.approvals, row.required) for row in queue.mine[:6]] == [
        (1, 2),
        *[(0, 2)] * 4,
        (1, 2),
    ]
    assert [row.decided_by_me for row in queue.others] == [
        i % 4 == 3 for i in range(QUEUE_SECTION_LIMIT)
    ]
    assert not any(row.may_decide for row in queue.others)

    page = html_of(browser(alice), "/")
    assert section_rows(page, "mine") == [str(row.id) for row in queue.mine]
    assert section_rows(page, "others") == [str(row.id) for row in queue.others]
    assert f"{QUEUE_SECTION_LIMIT} of {len(mine)} shown, oldest first." in page
    assert f"{QUEUE_SECTION_LIMIT} of {len(others)} shown, oldest first." in page
    assert f'<span class="count" id="mine-count">{len(mine)}</span>' in page
    assert f'<span class="count" id="others-count">{len(others)}</span>' in page

    viewer = queue_for_user(user=user_make(username="victor", decide=False, view=True))
    everything = sorted(mine + others, key=lambda call: call.created_at)
    assert (viewer.mine_count, viewer.others_count) == (0, len(everything))
    assert [row.id for row in viewer.others] == [
        call.pk for call in everything[:QUEUE_SECTION_LIMIT]
    ]


def test_the_queue_for_htmx_is_the_partial_only(agent: Agent) -> None:
    call_make(agent=agent, arguments=payment("1250.00"))
    page = html_of(browser(user_make(username="alice")), "/", HX_Request="true")
    assert page.lstrip().startswith('<section id="queue"')
    assert "hx-swap-oob" not in page
    assert "<html" not in page


def test_queue_rows_truncate_long_values_and_escape_them(agent: Agent) -> None:
    long_principal = "p" * 150
    call_make(agent=agent, arguments=payment("1250.00"), principal=long_principal)
    call_make(agent=agent, arguments=payment("1250.00"), principal=XSS)
    page = html_of(browser(user_make(username="alice")), "/")
    assert long_principal not in page
    assert "p" * 39 + "…" in page
    assert XSS not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_the_queue_query_count_does_not_grow_with_its_rows(
    agent: Agent, django_assert_max_num_queries: object
) -> None:
    alice = user_make(username="alice")
    call_make(agent=agent, arguments=payment("1250.00"))
    client = browser(alice)
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        client.get("/")
    for amount in range(600, 630):
        call_make(agent=agent, arguments=payment(f"{amount}.00"))
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        assert html_of(client, "/").count('<li id="call-') == 31


# --- the call page ----------------------------------------------------------------------------


def test_sum_rules_show_spent_this_call_and_the_total_after_approval(agent: Agent) -> None:
    rule_make(line="daily: pay arg=amount sum USD 2000.00 per day -> gate")
    call_make(agent=agent, arguments=payment("300.00"))  # allowed: recorded in the ledger
    call = call_make(agent=agent, arguments=payment("1250.00"))
    page = html_of(browser(user_make(username="alice")), f"/calls/{call.pk}/")
    caps = page[page.index('<table class="caps">') :]
    assert '<td class="num" data-label="This call"><span>USD 1,250.00</span></td>' in caps
    assert '<td class="num" data-label="Spent now"><span>USD 300.00</span></td>' in caps
    assert "<strong>USD 1,550.00</strong>" in caps
    assert "USD 2,000.00" in caps
    assert "per day" in caps


def test_a_two_approval_gate_shows_one_of_two_after_the_first(agent: Agent) -> None:
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    Gate.objects.filter(name="treasury").update(required_approvals=2)
    call = call_make(agent=agent, arguments=payment("200.00"), tool="wire")
    alice, bob = user_make(username="alice"), user_make(username="bob")
    assert "0 of 2" in html_of(browser(bob), f"/calls/{call.pk}/")
    response = browser(alice).post(
        f"/calls/{call.pk}/approve",
        {"comment": "fine by me", "arguments_sha256": call.arguments_sha256},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert "1 of 2" in response.content.decode()
    assert "It waits for more approvals" in response.content.decode()
    bob_page = html_of(browser(bob), f"/calls/{call.pk}/")
    assert "1 of 2" in bob_page
    assert "approved by alice" in bob_page
    assert "fine by me" in bob_page
    assert 'name="arguments_sha256"' in bob_page  # bob may still decide


def test_the_scope_choice_only_for_a_hold_by_the_permission_mode_alone(agent: Agent) -> None:
    prompting = agent_make(name="asker", mode="prompt")
    mode_only = call_make(agent=prompting, arguments='{"path": "/tmp/x"}', tool="read_file")
    capped = call_make(agent=agent, arguments=payment("1250.00"))
    alice = browser(user_make(username="alice"))
    mode_page = html_of(alice, f"/calls/{mode_only.pk}/")
    for scope in ("once", "run", "always"):
        assert f'name="scope" value="{scope}"' in mode_page
    assert 'name="scope"' not in html_of(alice, f"/calls/{capped.pk}/")


def test_after_a_decision_the_page_shows_who_what_when_and_the_trail(agent: Agent) -> None:
    call = call_make(agent=agent, arguments=payment("1250.00"))
    client = browser(user_make(username="alice"))
    response = client.post(
        f"/calls/{call.pk}/deny", {"comment": "not this month", "arguments_sha256": "x" * 64}
    )
    assert response.status_code == 409  # the digest of another page
    response = client.post(
        f"/calls/{call.pk}/deny",
        {"comment": "not this month", "arguments_sha256": call.arguments_sha256},
    )
    assert response.status_code == 303
    page = html_of(client, f"/calls/{call.pk}/")
    outcome = page[page.index('class="outcome') :]
    assert outcome.startswith('class="outcome outcome-denied">denied by alice at ')
    assert "not this month" in page
    assert "call pending" in page
    assert "call denied" in page
    assert 'name="comment"' not in page


WHY_TITLE = re.compile(r'<h2 id="why-title">([^<]*)</h2>')


def test_the_reasons_heading_says_what_became_of_the_call(agent: Agent) -> None:
    rule_make(line="no-wire: wire arg=amount max USD 5.00 -> refuse")
    refused = call_make(agent=agent, tool="wire", arguments=payment("50.00"))
    allowed = call_make(agent=agent, arguments=payment("5.00"))
    held = call_make(agent=agent, arguments=payment("600.00"))
    denied = call_make(agent=agent, arguments=payment("601.00"))
    assert [c.status for c in (refused, allowed, held, denied)] == [
        "refused",
        "allowed",
        "pending",
        "pending",
    ]
    client = browser(user_make(username="alice"))
    assert (
        client.post(
            f"/calls/{denied.pk}/deny", {"comment": "", "arguments_sha256": denied.arguments_sha256}
        ).status_code
        == 303
    )

    def heading(call: Call) -> list[str]:
        return WHY_TITLE.findall(html_of(client, f"/calls/{call.pk}/"))

    assert heading(refused) == ["Why it was refused"]
    assert heading(allowed) == ["Why it was allowed"]
    assert heading(held) == ["Why it is held"]
    assert heading(denied) == ["Why it was held"]


def test_the_extend_button_extends_once(agent: Agent) -> None:
    call = call_make(agent=agent, arguments=payment("1250.00"))
    client = browser(user_make(username="alice"))
    assert f'action="/calls/{call.pk}/extend"' in html_of(client, f"/calls/{call.pk}/")
    response = client.post(f"/calls/{call.pk}/extend", headers={"HX-Request": "true"})
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith(f'<article id="call-{call.pk}">')
    assert "extended once" in page
    assert f'action="/calls/{call.pk}/extend"' not in page


def test_the_call_page_escapes_everything_the_model_wrote(db: None) -> None:
    asker = agent_make(name="asker", mode="prompt")
    call = call_make(
        agent=asker,
        arguments=json.dumps({"amount": "1250.00", "memo": XSS, XSS: 1}),
        tool=XSS,
        context=f"context {XSS}",
        run_id=f"run {XSS}",
        principal=XSS,
    )
    assert call.status == "pending"
    alice = browser(user_make(username="alice"))
    page = html_of(alice, f"/calls/{call.pk}/")
    assert XSS not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 6
    queue = html_of(alice, "/")
    assert XSS not in queue
    assert "&lt;img src=x onerror=alert(1)&gt;" in queue


def test_a_missing_call_is_404(db: None) -> None:
    client = browser(user_make(username="alice"))
    assert client.get("/calls/00000000-0000-0000-0000-000000000000/").status_code == 404


# --- safety -----------------------------------------------------------------------------------


def test_every_page_sends_the_strict_policy_and_has_no_inline_script_or_style(
    agent: Agent,
) -> None:
    call = call_make(agent=agent, arguments=payment("1250.00"))
    client = browser(user_make(username="alice"))
    for url in ["/", f"/calls/{call.pk}/", "/history/", "/accounts/login/"]:
        response = client.get(url)
        assert response["Content-Security-Policy"] == POLICY
        page = response.content.decode()
        assert not INLINE_SCRIPT.search(page), url
        assert "<style" not in page
        assert " style=" not in page
        # Nothing loaded from another site (a bare "cdn" test failed on a random CSRF token).
        assert not OFF_SITE.search(page), url
    assert "script-src 'self';" in POLICY
    assert "frame-ancestors 'none'" in POLICY


def test_htmx_is_served_locally_with_its_ws_extension_and_a_safe_config(agent: Agent) -> None:
    client = browser(user_make(username="alice"))
    page = html_of(client, "/")
    assert '<script src="/static/django_htmx/htmx-2.min.js" defer></script>' in page
    assert '<script src="/static/django_htmx/ext/hx-ws-2.min.js" defer></script>' in page
    assert '<script src="/static/js/countersign.js" defer></script>' in page
    config = re.search(r'<meta name="htmx-config" content=\'([^\']+)\'>', page)
    assert config is not None
    assert json.loads(config[1]) == {
        "includeIndicatorStyles": False,
        "allowEval": False,
        "allowScriptTags": False,
    }
    headers = re.search(r"<body hx-ext=\"ws\" hx-headers='([^']+)'", page)
    assert headers is not None
    assert len(json.loads(headers[1])["X-CSRFToken"]) == 64
    assert 'ws-connect="/ws/v1/queue"' in page


def test_the_api_docs_still_render_and_their_schema_has_no_duplicate_keys(db: None) -> None:
    docs = Client().get("/api/v1/docs")
    assert docs.status_code == 200
    assert docs["Content-Security-Policy"] == POLICY
    assert not INLINE_SCRIPT.search(
        docs.content.decode().replace('<script type="application/json"', "")
    )

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), keys  # Swagger UI refuses such a document
        return dict(pairs)

    json.loads(Client().get("/api/v1/openapi.json").content, object_pairs_hook=no_duplicates)


# --- filters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minor", "currency", "text"),
    [(125000, "USD", "USD 1,250.00"), (5000, "JPY", "JPY 5,000"), (1250, "BHD", "BHD 1.250")],
)
def test_the_money_filter_uses_the_currency_table(minor: int, currency: str, text: str) -> None:
    assert money(minor, currency) == text
    assert (
        Template("{% load money %}{{ v|money:c }}").render(Context({"v": minor, "c": currency}))
        == text
    )


def test_the_money_filter_takes_money_with_its_exponent() -> None:
    assert money(capcore.Limit("XAU", 3, 1234567)) == "XAU 1,234.567"
    assert money(None) == ""


def test_time_left() -> None:
    now = timezone.now()
    assert time_left(now + timedelta(seconds=42), now) == "42s"
    assert time_left(now + timedelta(minutes=12, seconds=5), now) == "12m 05s"
    assert time_left(now + timedelta(hours=1, minutes=4), now) == "1h 04m"
    assert time_left(now + timedelta(days=2, hours=3), now) == "2d 03h"
    assert time_left(now - timedelta(seconds=1), now) == "expiring"
    assert time_left(None, now) == ""


def test_a_rule_that_cannot_read_the_call_says_why(agent: Agent) -> None:
    rule_make(line="payees: pay arg=amount sum USD 100.00 per day by arg=payee -> gate")
    call = call_make(agent=agent, arguments=payment("50.00"))  # no payee: its key is missing
    page = html_of(browser(user_make(username="alice")), f"/calls/{call.pk}/")
    caps = page[page.index('<table class="caps">') :]
    assert "not assessable: the key argument payee is missing" in caps
    assert "(limit USD 100.00 per day)" in caps
