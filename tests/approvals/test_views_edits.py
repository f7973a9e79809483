"""Edit, then approve through the call page's form: the field, the answers and their reasons,
and the page of an edited call."""

from __future__ import annotations

import hashlib
import html
import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from approvals.models import Call, LedgerEntry
from approvals.services.decisions import (
    EDIT_NOT_ELIGIBLE,
    EDIT_NOT_STRICT,
    EDIT_REFUSED,
    Conflict,
)
from capcore.strictjson import NOT_JSON
from tests.factories import agent_make, call_make, gate_make, rule_make, user_make

# As a model might write them: spread over lines (a browser sends them back with CRLF).
ARGUMENTS = '{\n  "amount": 600.50,\n  "memo": "<b>rent</b>"\n}'


@pytest.fixture
def call(db: None) -> Call:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="huge: pay arg=amount max USD 1000.00 -> refuse")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 -> gate")
    held = call_make(agent=agent_make(), arguments=ARGUMENTS)
    assert held.status == "pending"
    return held


@pytest.fixture
def alice(db: None) -> Client:
    client = Client()
    client.force_login(user_make(username="alice", decide=True))
    return client


def approve(client: Client, call: Call, **fields: str) -> tuple[int, str]:
    data = {"comment": "", "arguments_sha256": call.arguments_sha256, **fields}
    response = client.post(f"/calls/{call.pk}/approve", data)
    return response.status_code, response.content.decode()


def test_the_approve_form_has_the_arguments_field_filled_as_they_are(
    call: Call, alice: Client
) -> None:
    page = alice.get(f"/calls/{call.pk}/").content.decode()
    start = page.index(f'action="/calls/{call.pk}/approve"')
    form = page[start : page.index("</form>", start)]
    assert "Edit arguments" in form
    assert 'name="arguments" rows="8"' in form
    # After the tag's own line break, the text exactly (escaped), not pretty-printed.
    assert f">\n{html.escape(ARGUMENTS)}</textarea>" in form
    assert "<b>rent</b>" not in page


def test_an_untouched_field_sent_back_by_a_browser_is_an_ordinary_approval(
    call: Call, alice: Client
) -> None:
    status, _ = approve(alice, call, arguments=ARGUMENTS.replace("\n", "\r\n"))
    assert status == 303
    stored = Call.objects.get(pk=call.pk)
    assert (stored.status, stored.arguments, stored.original_arguments_sha256) == (
        "approved",
        ARGUMENTS,
        "",
    )


def test_an_edit_is_approved_and_the_page_shows_both_versions(call: Call, alice: Client) -> None:
    edited = '{\r\n  "amount": 450.00,\r\n  "memo": "<b>rent</b>, in part"\r\n}'
    status, _ = approve(alice, call, arguments=edited, comment="part now")
    assert status == 303
    stored = Call.objects.get(pk=call.pk)
    as_read = edited.replace("\r\n", "\n")
    assert (stored.status, stored.arguments) == ("approved", as_read)
    assert stored.arguments_sha256 == hashlib.sha256(as_read.encode()).hexdigest()
    assert list(LedgerEntry.objects.values_list("minor", flat=True)) == [45000]
    page = alice.get(f"/calls/{call.pk}/").content.decode()
    assert "The agent's original arguments" in page
    assert "Edited by alice" in page
    assert stored.original_arguments_sha256 in page
    assert stored.arguments_sha256 in page
    assert "450.00" in page
    assert "600.50" in page
    assert "call edited" in page


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        ('{"amount": 450.00', 400, EDIT_NOT_STRICT.format(category=NOT_JSON)),
        ('{"amount": 2000.00}', 409, EDIT_REFUSED.format(rules="cap rule huge")),
    ],
)
def test_a_bad_or_refused_edit_answers_its_reason_and_changes_nothing(
    call: Call, alice: Client, text: str, status: int, reason: str
) -> None:
    assert approve(alice, call, arguments=text) == (status, reason)
    stored = Call.objects.get(pk=call.pk)
    assert (stored.status, stored.arguments, stored.original_arguments) == (
        "pending",
        ARGUMENTS,
        "",
    )


def test_an_edit_into_a_gate_of_another_group_is_403_with_its_reason(call: Call) -> None:
    treasury = Group.objects.create(name="treasury")
    rule_make(line="vast: pay arg=amount max USD 900.00 -> gate treasury")
    gate_make(name="treasury", group=treasury)
    bob = Client()
    bob.force_login(user_make(username="bob", decide=True))
    # The call as it stands (held at the default gate) is bob's to decide; the edit is not.
    status, text = approve(bob, call, arguments='{"amount": 950.00}')
    assert (status, text) == (
        403,
        EDIT_NOT_ELIGIBLE.format(gates="the default gate, gate treasury"),
    )
    assert Call.objects.get(pk=call.pk).arguments == ARGUMENTS


def test_a_deny_ignores_the_arguments_field(call: Call, alice: Client) -> None:
    response = alice.post(
        f"/calls/{call.pk}/deny",
        {"comment": "no", "arguments_sha256": call.arguments_sha256, "arguments": "{}"},
    )
    assert response.status_code == 303
    stored = Call.objects.get(pk=call.pk)
    assert (stored.status, stored.arguments) == ("denied", ARGUMENTS)


def test_after_an_edit_an_earlier_approver_decides_again_from_the_queue(db: None) -> None:
    finance = Group.objects.create(name="finance")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    gate_make(name="finance", group=finance, required_approvals=2)
    call = call_make(agent=agent_make(), arguments=ARGUMENTS)
    alice, bob = Client(), Client()
    alice.force_login(user_make(username="alice", groups=[finance]))
    bob.force_login(user_make(username="bob", groups=[finance]))

    def mine(client: Client) -> list[str]:
        page = client.get("/").content.decode()
        if 'id="mine"' not in page:  # the section's list is there only when it has rows
            return []
        start = page.index('id="mine"')
        return re.findall(
            r'<li id="call-([0-9a-f-]{36})"', page[start : page.index("</ol>", start)]
        )

    assert approve(alice, call)[0] == 303
    assert mine(alice) == []
    assert approve(bob, call, arguments='{"amount": 550.00}')[0] == 303
    assert mine(alice) == [str(call.pk)]
    page = alice.get(f"/calls/{call.pk}/").content.decode()
    edited = Call.objects.get(pk=call.pk)
    assert f'name="arguments_sha256" value="{edited.arguments_sha256}"' in page
    assert "<strong>1 of 2</strong>" in page  # bob's approval of the edit, not hers
    assert approve(alice, call) == (409, Conflict.STALE.value)  # the digest she saw first
    assert approve(alice, edited)[0] == 303
    assert Call.objects.get(pk=call.pk).status == "approved"
