"""The receipt of a call that ends allowed or approved: signed once in the deciding
transaction, with exactly the claims docs/receipts.md lists, verified here by PyJWT (an
independent JOSE implementation) against the published keys as well as by the client; no
other ending has one."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import countersign
from approvals.models import Agent, Call
from approvals.receipts.issue import ISSUED_TWICE, receipt_issue
from approvals.receipts.keys import RECEIPT_TYPE, receipt_keys
from approvals.selectors.calls import call_state
from approvals.services.decisions import call_decide, calls_decide
from approvals.services.lifecycle import call_cancel, calls_expire_due
from tests.approvals.receipts.conftest import pyjwt_claims
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make

ISSUER = "https://countersign.example"


@pytest.fixture(autouse=True)
def _issuer(settings: Any) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = ISSUER


@pytest.fixture
def bot(db: None) -> Agent:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="spend: pay arg=amount sum USD 10000.00 per day -> gate")
    rule_make(line="wires: wire arg=amount max USD 100.00 -> refuse")
    return agent_make(name="bot", principal="carol")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def decide(call: Call, username: str, *, approve: bool = True, **extra: Any) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user_make(username=username, groups=extra.pop("groups", ())),
        approve=approve,
        comment="",
        arguments_sha256=Call.objects.get(pk=call.pk).arguments_sha256,
        **extra,
    )


def test_an_allowed_call_has_a_receipt_with_every_claim(bot: Agent, jwks: dict[str, Any]) -> None:
    arguments = '{"amount": "120.50", "memo": "office chairs"}'
    call = call_make(agent=bot, arguments=arguments, run_id="run-7")
    assert call.status == "allowed"
    stored = Call.objects.get(pk=call.pk)
    assert stored.receipt == call.receipt != ""
    assert call_state(stored)["receipt"] == stored.receipt

    header = jwt.get_unverified_header(stored.receipt)
    assert header == {"alg": "EdDSA", "typ": RECEIPT_TYPE, "kid": receipt_keys().kid}
    claims = pyjwt_claims(stored.receipt, jwks=jwks, issuer=ISSUER)
    assert claims == {
        "iss": ISSUER,
        "sub": str(call.pk),
        "jti": str(call.pk),
        "iat": int(call.created_at.timestamp()),
        "exp": int(call.created_at.timestamp()) + 900,
        "agent": "bot",
        "principal": "carol",
        "run_id": "run-7",
        "tool": "pay",
        "arguments": arguments,
        "arguments_sha256": digest(arguments),
        "status": "allowed",
        "approvals": [],
        "amounts": [
            {"rule": "big", "amount": "120.50", "currency": "USD"},
            {"rule": "spend", "amount": "120.50", "currency": "USD"},
        ],
        "edited": False,
    }
    # The client's own verification agrees, by the text and by the parsed arguments.
    assert (
        countersign.verify_receipt(
            stored.receipt, tool="pay", arguments=arguments, issuer=ISSUER, jwks=jwks
        )
        == claims
    )
    parsed = {"amount": "120.50", "memo": "office chairs"}
    assert countersign.verify_receipt(stored.receipt, tool="pay", arguments=parsed, jwks=jwks)


def test_the_ttl_setting_sets_the_expiry(bot: Agent, settings: Any, jwks: dict[str, Any]) -> None:
    settings.COUNTERSIGN_RECEIPT_TTL = 60
    call = call_make(agent=bot, arguments=payment("5.00"))
    claims = pyjwt_claims(call.receipt, jwks=jwks, issuer=ISSUER)
    assert claims["exp"] - claims["iat"] == 60


def _receipt_writes(queries: CaptureQueriesContext) -> list[str]:
    """The statements that write a call's receipt column."""
    return [
        query["sql"]
        for query in queries
        if '"receipt"' in query["sql"] and query["sql"].startswith(("INSERT", "UPDATE"))
    ]


def test_signing_takes_no_statement_of_its_own(bot: Agent) -> None:
    """The receipt goes into the statement that writes the call's end: the allowed call's
    INSERT, the approved call's UPDATE of its status."""
    with CaptureQueriesContext(connection) as submitted:
        call = call_make(agent=bot, arguments=payment("2.00"))
    assert call.status == "allowed"
    (insert,) = _receipt_writes(submitted)
    assert insert.startswith('INSERT INTO "approvals_call"')
    held = call_make(agent=bot, arguments=payment("600.00"))
    alice = user_make(username="alice")
    with CaptureQueriesContext(connection) as approved:
        call_decide(
            call_id=held.pk,
            user=alice,
            approve=True,
            comment="",
            arguments_sha256=held.arguments_sha256,
        )
    (update,) = _receipt_writes(approved)
    assert update.startswith('UPDATE "approvals_call" SET "status"')


def test_refused_held_denied_expired_and_cancelled_calls_have_none(bot: Agent) -> None:
    refused = call_make(agent=bot, tool="wire", arguments=payment("500.00"))
    held = call_make(agent=bot, arguments=payment("600.00"))
    denied = decide(call_make(agent=bot, arguments=payment("700.00")), "dora", approve=False)
    cancelled = call_cancel(agent=bot, call_id=call_make(agent=bot, arguments=payment("800.00")).pk)
    late = call_make(agent=bot, arguments=payment("900.00"))
    assert calls_expire_due(now=timezone.now() + timedelta(days=2)) >= 1
    assert cancelled is not None
    statuses = {}
    for call in (refused, held, denied, cancelled, late):
        stored = Call.objects.get(pk=call.pk)
        statuses[stored.status] = (stored.receipt, call_state(stored)["receipt"])
    assert statuses == dict.fromkeys(("refused", "expired", "denied", "cancelled"), ("", None))


def test_a_held_call_gets_its_receipt_when_approved_and_not_before(
    bot: Agent, jwks: dict[str, Any]
) -> None:
    call = call_make(agent=bot, arguments=payment("600.00"))
    assert (call.status, call.receipt) == ("pending", "")
    approved = decide(call, "alice")
    assert approved.status == "approved"
    stored = Call.objects.get(pk=call.pk)
    claims = pyjwt_claims(stored.receipt, jwks=jwks, issuer=ISSUER)
    (approval,) = stored.approvals.all()
    assert claims["status"] == "approved"
    assert stored.decided_at is not None
    assert claims["iat"] == int(stored.decided_at.timestamp())
    assert claims["approvals"] == [
        {"by": "alice", "gate": "", "at": approval.created_at.isoformat().replace("+00:00", "Z")}
    ]
    assert claims["amounts"] == [
        {"rule": "big", "amount": "600.00", "currency": "USD"},
        {"rule": "spend", "amount": "600.00", "currency": "USD"},
    ]
    assert claims["edited"] is False
    assert call_state(stored)["receipt"] == stored.receipt


def test_a_quorum_signs_once_it_is_met_naming_every_approver(
    db: None, jwks: dict[str, Any]
) -> None:
    finance = Group.objects.create(name="finance")
    rule_make(line="big: pay arg=amount max EUR 500.00 -> gate finance")
    gate_make(name="finance", group=finance, required_approvals=2)
    call = call_make(agent=agent_make(), arguments='{"amount": 1250.00, "currency": "EUR"}')
    first = decide(call, "alice", groups=[finance])
    assert (first.status, Call.objects.get(pk=call.pk).receipt) == ("pending", "")
    second = decide(call, "bob", groups=[finance])
    assert second.status == "approved"
    claims = pyjwt_claims(Call.objects.get(pk=call.pk).receipt, jwks=jwks, issuer=ISSUER)
    assert [(item["by"], item["gate"]) for item in claims["approvals"]] == [
        ("alice", "finance"),
        ("bob", "finance"),
    ]
    assert claims["amounts"] == [{"rule": "big", "amount": "1250.00", "currency": "EUR"}]


def test_an_edited_approval_names_the_edited_text_and_fails_for_the_original(
    bot: Agent, jwks: dict[str, Any]
) -> None:
    original = '{"amount": "600.00", "to": "ACME"}'
    call = call_make(agent=bot, arguments=original)
    edited_text = '{"amount": "400.00", "to": "ACME"}'
    decide(call, "alice", arguments=edited_text)
    stored = Call.objects.get(pk=call.pk)
    assert stored.status == "approved"
    claims = pyjwt_claims(stored.receipt, jwks=jwks, issuer=ISSUER)
    assert (claims["arguments"], claims["arguments_sha256"], claims["edited"]) == (
        edited_text,
        digest(edited_text),
        True,
    )
    assert claims["amounts"][0] == {"rule": "big", "amount": "400.00", "currency": "USD"}
    verify = countersign.verify_receipt
    assert verify(stored.receipt, tool="pay", arguments=edited_text, jwks=jwks)
    assert verify(stored.receipt, tool="pay", arguments=json.loads(edited_text), jwks=jwks)
    with pytest.raises(countersign.ReceiptWrongArguments):
        verify(stored.receipt, tool="pay", arguments=original, jwks=jwks)
    with pytest.raises(countersign.ReceiptWrongArguments):
        verify(stored.receipt, tool="pay", arguments=json.loads(original), jwks=jwks)


def test_a_batch_decision_signs_each_call_it_approves(bot: Agent, jwks: dict[str, Any]) -> None:
    calls = [call_make(agent=bot, arguments=payment(f"{600 + i}.00")) for i in range(3)]
    outcomes = calls_decide(
        user=user_make(username="alice"),
        approve=True,
        comment="",
        calls=[f"{call.pk}:{call.arguments_sha256}" for call in calls],
    )
    assert all(outcome.decided for outcome in outcomes)
    for call in calls:
        claims = pyjwt_claims(Call.objects.get(pk=call.pk).receipt, jwks=jwks, issuer=ISSUER)
        assert (claims["sub"], claims["arguments"], claims["approvals"][0]["by"]) == (
            str(call.pk),
            call.arguments,
            "alice",
        )


def test_a_receipt_is_never_issued_again(bot: Agent) -> None:
    call = call_make(agent=bot, arguments=payment("3.00"))
    with pytest.raises(ValueError, match=ISSUED_TWICE):
        receipt_issue(
            call=call, status=Call.Status.ALLOWED, approvals=(), assessments=(), now=timezone.now()
        )
    assert Call.objects.get(pk=call.pk).receipt == call.receipt
