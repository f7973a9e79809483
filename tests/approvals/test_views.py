"""The decision endpoints and the minimal call page, through a logged-in browser session."""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.models import Call
from tests.factories import agent_make, call_make, rule_make, user_make

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def call(db: None) -> Call:
    agent = agent_make()
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    held = call_make(agent=agent, arguments=f'{{"amount": 600.50, "memo": "{XSS}"}}')
    assert held.status == "pending"
    return held


def browser(username: str, *permissions: str, csrf: bool = False) -> Client:
    user = user_make(
        username=username, decide="decide_call" in permissions, view="view_call" in permissions
    )
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def decide(client: Client, call: Call, verb: str, **fields: str) -> int:
    data = {"comment": "", "arguments_sha256": call.arguments_sha256, **fields}
    return client.post(f"/calls/{call.pk}/{verb}", data).status_code


def test_the_page_needs_a_login(call: Call) -> None:
    response = Client().get(f"/calls/{call.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_user_without_view_or_decide_permission_gets_403(call: Call) -> None:
    assert browser("nobody").get(f"/calls/{call.pk}/").status_code == 403


def test_the_page_shows_escaped_arguments_with_literal_numbers_and_the_form(call: Call) -> None:
    response = browser("alice", "decide_call").get(f"/calls/{call.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert XSS not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert '"amount": 600.50' in html.replace("&quot;", '"')
    assert "Approve" in html
    assert "Deny" in html
    assert 'name="arguments_sha256"' in html


def test_a_viewer_who_may_not_decide_sees_no_buttons_and_a_forged_post_is_403(call: Call) -> None:
    viewer = browser("victor", "view_call")
    html = viewer.get(f"/calls/{call.pk}/").content.decode()
    assert "Approve" not in html
    assert decide(viewer, call, "approve") == 403
    assert Call.objects.get(pk=call.pk).status == "pending"


def test_approve_redirects_with_303_and_records_the_comment(call: Call) -> None:
    client = browser("alice", "decide_call")
    response = client.post(
        f"/calls/{call.pk}/approve",
        {"comment": "ok, paid", "arguments_sha256": call.arguments_sha256},
    )
    assert response.status_code == 303
    assert response["Location"] == f"/calls/{call.pk}/"
    approved = Call.objects.get(pk=call.pk)
    assert (approved.status, approved.decision_comment) == ("approved", "ok, paid")
    page = client.get(f"/calls/{call.pk}/").content.decode()
    assert "approved by alice" in page
    assert "call approved" in page  # the audit trail


def test_deny_without_a_comment_gives_the_default_advice(call: Call) -> None:
    assert decide(browser("alice", "decide_call"), call, "deny") == 303
    denied = Call.objects.get(pk=call.pk)
    assert denied.status == "denied"
    assert denied.decision_comment.startswith("Denied by a reviewer.")


def test_answers_in_the_documented_order(call: Call) -> None:
    client = browser("alice", "decide_call")
    missing = "00000000-0000-0000-0000-000000000000"
    assert client.post(f"/calls/{missing}/approve", {}).status_code == 404
    assert decide(client, call, "approve", scope="forever") == 400
    assert decide(client, call, "approve", arguments_sha256="0" * 64) == 409
    assert decide(client, call, "approve") == 303
    assert decide(client, call, "deny") == 409
    assert Call.objects.get(pk=call.pk).status == "approved"


def test_the_principal_may_not_approve_their_own_call(call: Call) -> None:
    assert decide(browser("carol", "decide_call"), call, "approve") == 403


def test_csrf_is_enforced(call: Call) -> None:
    client = browser("alice", "decide_call", csrf=True)
    assert decide(client, call, "approve") == 403
    assert Call.objects.get(pk=call.pk).status == "pending"


def test_an_htmx_decision_gets_the_rerendered_call(call: Call) -> None:
    client = browser("alice", "decide_call")
    response = client.post(
        f"/calls/{call.pk}/deny",
        {"comment": "no", "arguments_sha256": call.arguments_sha256},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith(f'<article id="call-{call.pk}">')
    assert "denied" in html


def test_extend_once_then_409(call: Call) -> None:
    client = browser("alice", "decide_call")
    before = Call.objects.get(pk=call.pk).expires_at
    assert client.post(f"/calls/{call.pk}/extend").status_code == 303
    after = Call.objects.get(pk=call.pk).expires_at
    assert before is not None
    assert after is not None
    assert (after - before).total_seconds() == 3600
    assert client.post(f"/calls/{call.pk}/extend").status_code == 409
    assert browser("victor", "view_call").post(f"/calls/{call.pk}/extend").status_code == 403
