"""The step-up's services in process: the challenge binds the call, its digest and the verb;
a nonce is used once and expires; a decision at a passkey gate without an assertion is
refused and changes nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals.models import Agent, Call, Gate
from approvals.services.decisions import PasskeyRequired, call_decide
from identity.models import Passkey, PasskeyChallenge
from identity.passkeys import (
    CHALLENGE_UNUSABLE,
    PasskeyRefused,
    stepup_begin,
    stepup_challenge,
    stepup_verify,
)
from tests.factories import call_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db
DIGEST = "a" * 64


@pytest.fixture(autouse=True)
def _public_url(settings: object) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = "https://countersign.example.test"  # type: ignore[attr-defined]


def _with_passkey(username: str = "alice"):  # type: ignore[no-untyped-def]
    user = user_make(username=username)
    Passkey.objects.create(
        user=user,
        name="Laptop",
        credential_id=f"{username}AAAAAAAA"[:8],
        public_key=b"k",
        created=timezone.now(),
    )
    return user


def test_the_challenge_binds_the_call_the_digest_and_the_verb() -> None:
    call_id = uuid.uuid4()
    base = stepup_challenge(call_id=call_id, arguments_sha256=DIGEST, approve=True, nonce="n")
    assert base != stepup_challenge(
        call_id=uuid.uuid4(), arguments_sha256=DIGEST, approve=True, nonce="n"
    )
    assert base != stepup_challenge(
        call_id=call_id, arguments_sha256="b" * 64, approve=True, nonce="n"
    )
    assert base != stepup_challenge(
        call_id=call_id, arguments_sha256=DIGEST, approve=False, nonce="n"
    )
    assert base != stepup_challenge(
        call_id=call_id, arguments_sha256=DIGEST, approve=True, nonce="m"
    )


def _nonce(user, call_id: uuid.UUID, approve: bool = True) -> str:  # type: ignore[no-untyped-def]
    import json

    answer = json.loads(
        stepup_begin(user=user, call_id=call_id, arguments_sha256=DIGEST, approve=approve)
    )
    return str(answer["nonce"])


@pytest.mark.parametrize("other", ["call", "digest", "verb", "user"])
def test_a_nonce_made_for_another_decision_is_refused_and_kept(other: str) -> None:
    alice, call_id = _with_passkey(), uuid.uuid4()
    nonce = _nonce(alice, call_id)
    asked: dict[str, Any] = {
        "user": alice,
        "call_id": call_id,
        "arguments_sha256": DIGEST,
        "approve": True,
    }
    if other == "user":
        asked["user"] = _with_passkey("bob")
    else:
        changed: dict[str, dict[str, Any]] = {
            "call": {"call_id": uuid.uuid4()},
            "digest": {"arguments_sha256": "b" * 64},
            "verb": {"approve": False},
        }
        asked.update(changed[other])
    with pytest.raises(PasskeyRefused, match="used already or expired"):
        stepup_verify(nonce=nonce, credential="{}", **asked)
    assert PasskeyChallenge.objects.filter(nonce=nonce).exists()


def test_a_nonce_is_used_once_even_by_an_assertion_that_fails() -> None:
    alice, call_id = _with_passkey(), uuid.uuid4()
    nonce = _nonce(alice, call_id)
    fields: dict[str, Any] = {
        "user": alice,
        "call_id": call_id,
        "arguments_sha256": DIGEST,
        "approve": True,
    }
    with pytest.raises(PasskeyRefused, match="not valid"):
        stepup_verify(nonce=nonce, credential="{}", **fields)
    with pytest.raises(PasskeyRefused) as refused:
        stepup_verify(nonce=nonce, credential="{}", **fields)
    assert refused.value.message == CHALLENGE_UNUSABLE


def test_a_nonce_expires_within_two_minutes() -> None:
    alice, call_id = _with_passkey(), uuid.uuid4()
    nonce = _nonce(alice, call_id)
    later = timezone.now() + timedelta(seconds=121)
    with pytest.raises(PasskeyRefused) as refused:
        stepup_verify(
            user=alice,
            call_id=call_id,
            arguments_sha256=DIGEST,
            approve=True,
            nonce=nonce,
            credential="{}",
            now=later,
        )
    assert refused.value.message == CHALLENGE_UNUSABLE


def test_no_passkey_no_options() -> None:
    with pytest.raises(PasskeyRefused, match="no passkey"):
        stepup_begin(
            user=user_make(username="carol"),
            call_id=uuid.uuid4(),
            arguments_sha256=DIGEST,
            approve=True,
        )


def test_a_decision_at_a_passkey_gate_without_an_assertion_changes_nothing() -> None:
    alice = _with_passkey()
    rule_make(line="huge: pay arg=amount max USD 10000 -> gate treasury")
    Gate.objects.filter(name="treasury").update(require_passkey=True)
    agent = Agent.objects.create(name="bot", principal="carol", allowed_principals="*")
    call = call_make(agent=agent, arguments=payment("25000.00"))
    assert "treasury" in call.gates
    with pytest.raises(PasskeyRequired, match="requires a passkey"):
        call_decide(
            call_id=call.pk,
            user=alice,
            approve=True,
            comment="",
            arguments_sha256=call.arguments_sha256,
        )
    assert Call.objects.get(pk=call.pk).status == Call.Status.PENDING
