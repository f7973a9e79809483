"""``countersign.verify_receipt`` and ``requires_receipt`` on receipts the service signed:
every forgery refused with its reason (and refused by PyJWT too, an independent JOSE
implementation), arguments compared by exact text or as exact decimals, a replay guard, keys
fetched from the issuer and cached; and the receipt where a gated function runs."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import connection
from django.test import Client as DjangoClient
from django.utils import timezone
from joserfc import jws
from joserfc.jwk import OKPKey

import countersign
from approvals.models import Call
from approvals.receipts.keys import AUDIT_HEAD_TYPE, receipt_keys, sign_jws
from countersign import receipts
from tests.countersign.world import APPROVER, BIG_PAYMENT, PASSWORD, SMALL_PAYMENT, TOKEN
from tests.factories import agent_make, call_make, rule_make
from tests.live import Approver, LiveServer, start_server

AMOUNTS = '{"amount": 1250.00, "currency": "EUR", "to": "ACME", "lines": [1, 2.5, "x"]}'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture
def issued(db: None) -> Call:
    """An allowed call of ``pay`` whose receipt the service signed."""
    rule_make(line="big: pay arg=amount max EUR 5000.00 -> gate")
    call = call_make(agent=agent_make(), arguments=AMOUNTS)
    assert call.status == "allowed"
    return call


@pytest.fixture
def keys(db: None) -> dict[str, Any]:
    document: dict[str, Any] = DjangoClient().get("/.well-known/jwks.json").json()
    return document


def verify(receipt: str, keys: dict[str, Any], **checks: Any) -> dict[str, Any]:
    checks.setdefault("tool", "pay")
    checks.setdefault("arguments", AMOUNTS)
    return countersign.verify_receipt(receipt, jwks=keys, **checks)


def pyjwt_accepts(receipt: str, keys: dict[str, Any]) -> bool:
    try:
        kid = jwt.get_unverified_header(receipt).get("kid")
        by_kid = {key.key_id: key for key in jwt.PyJWKSet.from_dict(keys).keys}
        jwt.decode(receipt, key=by_kid[kid], algorithms=["EdDSA"])
    except (jwt.PyJWTError, KeyError):
        return False
    return True


# --- forgeries ----------------------------------------------------------------------------


def test_the_genuine_receipt_verifies_with_both_implementations(
    issued: Call, keys: dict[str, Any]
) -> None:
    assert verify(issued.receipt, keys)["sub"] == str(issued.pk)
    assert pyjwt_accepts(issued.receipt, keys)


def test_alg_none_is_refused_before_any_key_is_tried(issued: Call, keys: dict[str, Any]) -> None:
    header, payload, _ = issued.receipt.split(".")
    stated = json.loads(unb64(header))
    unsigned = f"{b64(json.dumps({**stated, 'alg': 'none'}).encode())}.{payload}."
    with pytest.raises(countersign.ReceiptBadSignature, match="only algorithm accepted"):
        verify(unsigned, keys)
    assert not pyjwt_accepts(unsigned, keys)


@pytest.mark.parametrize("secret", ["x", "jwk", "pem"])
def test_hs256_signed_with_the_public_key_is_refused(
    issued: Call, keys: dict[str, Any], secret: str
) -> None:
    """The classic confusion: a verifier that let the header pick the algorithm would check
    an HMAC keyed with the public key, which anyone has."""
    public = keys["keys"][0]
    material = {
        "x": unb64(public["x"]),
        "jwk": json.dumps(public).encode(),
        "pem": receipt_keys().published[0].as_pem(private=False),
    }[secret]
    header, payload, _ = issued.receipt.split(".")
    stated = json.loads(unb64(header))
    forged_header = b64(json.dumps({**stated, "alg": "HS256"}).encode())
    mac = hmac.new(material, f"{forged_header}.{payload}".encode(), hashlib.sha256).digest()
    forged = f"{forged_header}.{payload}.{b64(mac)}"
    with pytest.raises(countersign.ReceiptBadSignature):
        verify(forged, keys)
    assert not pyjwt_accepts(forged, keys)


def test_a_swapped_payload_is_refused(issued: Call, keys: dict[str, Any]) -> None:
    other = call_make(agent=issued.agent, arguments=AMOUNTS.replace("1250.00", "1.00"))
    header, _, signature = issued.receipt.split(".")
    _, payload, _ = other.receipt.split(".")
    swapped = f"{header}.{payload}.{signature}"
    with pytest.raises(countersign.ReceiptBadSignature):
        verify(swapped, keys, arguments=other.arguments)
    assert not pyjwt_accepts(swapped, keys)


def test_a_changed_byte_anywhere_is_refused(issued: Call, keys: dict[str, Any]) -> None:
    header, payload, signature = issued.receipt.split(".")
    claims = json.loads(unb64(payload))
    richer = b64(
        json.dumps({**claims, "arguments": claims["arguments"].replace("1250", "9250")}).encode()
    )
    for tampered in (f"{header}.{richer}.{signature}", f"{header}.{payload}.{signature[::-1]}"):
        with pytest.raises(countersign.ReceiptBadSignature):
            verify(tampered, keys)
        assert not pyjwt_accepts(tampered, keys)


def test_another_key_is_refused(issued: Call, keys: dict[str, Any]) -> None:
    claims = json.loads(unb64(issued.receipt.split(".")[1]))
    stranger = OKPKey.import_key(Ed25519PrivateKey.generate())
    for kid, refusal in (
        (receipt_keys().kid, countersign.ReceiptBadSignature),  # posing as the service's key
        (stranger.thumbprint(), countersign.ReceiptUnknownKey),  # naming its own
    ):
        header = {"alg": "EdDSA", "typ": receipts.RECEIPT_TYPE, "kid": kid}
        forged = jws.serialize_compact(
            header, json.dumps(claims).encode(), stranger, registry=receipts._EDDSA_ONLY
        )
        with pytest.raises(refusal):
            verify(forged, keys)
        assert not pyjwt_accepts(forged, keys)


def test_an_expired_receipt_is_refused(issued: Call, keys: dict[str, Any]) -> None:
    old = call_make(agent=issued.agent, arguments=AMOUNTS, now=timezone.now() - timedelta(hours=1))
    with pytest.raises(countersign.ReceiptExpired, match="submit the call again"):
        verify(old.receipt, keys)
    with pytest.raises(jwt.ExpiredSignatureError):
        jwt.decode(
            old.receipt,
            key=jwt.PyJWKSet.from_dict(keys).keys[0],
            algorithms=["EdDSA"],
        )
    claims = verify(issued.receipt, keys)
    with pytest.raises(countersign.ReceiptExpired):
        verify(issued.receipt, keys, now=claims["exp"])
    assert verify(issued.receipt, keys, now=claims["exp"] - 1)


def test_an_audit_head_is_not_a_receipt(issued: Call, keys: dict[str, Any]) -> None:
    claims = json.loads(unb64(issued.receipt.split(".")[1]))
    head = sign_jws(claims, AUDIT_HEAD_TYPE)  # the same key, the same claims, another type
    with pytest.raises(countersign.ReceiptMalformed, match="header"):
        verify(head, keys)


@pytest.mark.parametrize("receipt", ["", "not-a-jws", "a.b.c", "Zm9v.YmFy.YmF6", "€.€.€"], ids=str)
def test_what_is_not_a_receipt_is_refused_without_echoing_it(
    receipt: str, keys: dict[str, Any]
) -> None:
    with pytest.raises(countersign.ReceiptInvalid) as refused:
        verify(receipt, keys)
    if receipt:
        assert receipt not in str(refused.value)
    else:
        assert isinstance(refused.value, countersign.ReceiptMissing)


def test_the_wrong_tool_or_issuer_is_refused(issued: Call, keys: dict[str, Any]) -> None:
    with pytest.raises(countersign.ReceiptWrongTool):
        verify(issued.receipt, keys, tool="refund")
    with pytest.raises(countersign.ReceiptWrongIssuer):
        verify(issued.receipt, keys, issuer="https://elsewhere.example")
    issuer = json.loads(unb64(issued.receipt.split(".")[1]))["iss"]
    assert verify(issued.receipt, keys, issuer=issuer + "/")


# --- arguments ----------------------------------------------------------------------------


def test_text_arguments_are_compared_exactly(issued: Call, keys: dict[str, Any]) -> None:
    assert verify(issued.receipt, keys, arguments=AMOUNTS)
    assert verify(issued.receipt, keys, arguments=AMOUNTS.encode())
    for changed in (AMOUNTS.replace("1250.00", "1250.0"), AMOUNTS + " ", AMOUNTS.replace(" ", "")):
        with pytest.raises(countersign.ReceiptWrongArguments) as refused:
            verify(issued.receipt, keys, arguments=changed)
        assert "ACME" not in str(refused.value)


@pytest.mark.parametrize(
    "amount",
    [Decimal("1250.00"), Decimal("1250.0"), Decimal("1250"), 1250.0, 1250, Decimal("1.25E+3")],
    ids=repr,
)
def test_parsed_arguments_compare_numbers_as_exact_decimals(
    issued: Call, keys: dict[str, Any], amount: object
) -> None:
    parsed = {"amount": amount, "currency": "EUR", "to": "ACME", "lines": [1, Decimal("2.50"), "x"]}
    assert verify(issued.receipt, keys, arguments=parsed)


@pytest.mark.parametrize(
    "changed",
    [
        {"amount": Decimal("1250.001")},
        {"amount": 1250.001},
        {"amount": "1250.00"},  # a string where the approved call had a number
        {"amount": True},
        {"currency": "USD"},
        {"to": "ACME "},
        {"lines": [1, 2.5]},
        {"lines": (True, 2.5, "x")},
        {"extra": None},
    ],
    ids=repr,
)
def test_parsed_arguments_that_differ_are_refused(
    issued: Call, keys: dict[str, Any], changed: dict[str, Any]
) -> None:
    parsed = {"amount": Decimal("1250.00"), "currency": "EUR", "to": "ACME", "lines": [1, 2.5, "x"]}
    with pytest.raises(countersign.ReceiptWrongArguments):
        verify(issued.receipt, keys, arguments={**parsed, **changed})
    missing = dict(parsed)
    del missing["to"]
    with pytest.raises(countersign.ReceiptWrongArguments):
        verify(issued.receipt, keys, arguments=missing)


def test_a_decimal_sent_as_a_string_matches_the_number_it_spells(
    db: None, keys: dict[str, Any]
) -> None:
    """The client sends a ``Decimal`` as the string of its exact digits; the tool that
    receives it as a ``Decimal`` again matches it, and only it."""
    rule_make(line="big: pay arg=amount max USD 5000.00 -> gate")
    sent = '{"amount": "1250.00"}'
    call = call_make(agent=agent_make(), arguments=sent)
    for same in (Decimal("1250.00"), Decimal("1250"), "1250.00"):
        assert verify(call.receipt, keys, arguments={"amount": same})
    for other in (Decimal("1250.001"), "1250.0", "1250"):
        with pytest.raises(countersign.ReceiptWrongArguments):
            verify(call.receipt, keys, arguments={"amount": other})


# --- replays ------------------------------------------------------------------------------


def test_the_replay_guard_lets_a_receipt_run_once(issued: Call, keys: dict[str, Any]) -> None:
    guard = countersign.ReplayGuard()
    with pytest.raises(countersign.ReceiptWrongTool):  # a refusal does not use it up
        verify(issued.receipt, keys, tool="refund", replay_guard=guard)
    assert verify(issued.receipt, keys, replay_guard=guard)
    with pytest.raises(countersign.ReceiptReplayed):
        verify(issued.receipt, keys, replay_guard=guard)
    assert verify(issued.receipt, keys, replay_guard=countersign.ReplayGuard())


def test_the_replay_guard_forgets_a_jti_once_it_has_expired() -> None:
    guard = countersign.ReplayGuard()
    assert guard.first_use("a", expires_at=int(time.time()) - 1)
    assert guard.first_use("b", expires_at=int(time.time()) + 60)
    assert guard.first_use("a", expires_at=int(time.time()) + 60)  # "a" had expired
    assert not guard.first_use("b", expires_at=int(time.time()) + 60)


# --- keys fetched from the issuer -----------------------------------------------------------


@pytest.fixture
def live(transactional_db: None) -> Iterator[LiveServer]:
    from tests.countersign.world import world_create

    world_create()
    receipts.jwks_cache_clear()
    server = start_server()
    try:
        yield server
    finally:
        server.stop()
        receipts.jwks_cache_clear()


def test_keys_are_fetched_from_the_issuer_and_kept(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with countersign.Client(live.url, TOKEN) as client:
        state = client.call("pay", SMALL_PAYMENT)
    assert state["status"] == "allowed"
    claims = countersign.verify_receipt(
        state["receipt"], tool="pay", arguments=SMALL_PAYMENT, issuer=live.url
    )
    assert claims["iss"] == live.url
    live.stop()  # the keys fetched are kept: the receipt still verifies
    assert countersign.verify_receipt(
        state["receipt"], tool="pay", arguments=SMALL_PAYMENT, issuer=live.url
    )
    # Past their age they are fetched again; the issuer gone, they serve for a bounded while.
    monkeypatch.setattr(receipts, "JWKS_MAX_AGE", 0.0)
    assert countersign.verify_receipt(
        state["receipt"], tool="pay", arguments=SMALL_PAYMENT, issuer=live.url
    )
    monkeypatch.setattr(receipts, "JWKS_MAX_STALE", 0.0)
    with pytest.raises(countersign.ReceiptUnknownKey, match="could not be fetched"):
        countersign.verify_receipt(
            state["receipt"], tool="pay", arguments=SMALL_PAYMENT, issuer=live.url
        )
    monkeypatch.undo()
    stranger = OKPKey.import_key(Ed25519PrivateKey.generate())
    header = {"alg": "EdDSA", "typ": receipts.RECEIPT_TYPE, "kid": stranger.thumbprint()}
    forged = jws.serialize_compact(
        header, json.dumps(claims).encode(), stranger, registry=receipts._EDDSA_ONLY
    )
    with pytest.raises(countersign.ReceiptUnknownKey):
        countersign.verify_receipt(forged, tool="pay", arguments=SMALL_PAYMENT, issuer=live.url)


def test_an_unreachable_issuer_verifies_nothing(issued: Call) -> None:
    receipts.jwks_cache_clear()
    with pytest.raises(countersign.ReceiptUnknownKey, match="could not be fetched"):
        countersign.verify_receipt(
            issued.receipt, tool="pay", arguments=AMOUNTS, issuer="http://127.0.0.1:9"
        )


def test_without_issuer_or_keys_countersign_url_is_the_issuer(
    issued: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COUNTERSIGN_URL", raising=False)
    with pytest.raises(ValueError, match="COUNTERSIGN_URL"):
        countersign.verify_receipt(issued.receipt, tool="pay", arguments=AMOUNTS)
    monkeypatch.setenv("COUNTERSIGN_URL", "http://127.0.0.1:9")  # where nothing answers
    receipts.jwks_cache_clear()
    with pytest.raises(countersign.ReceiptUnknownKey, match="could not be fetched"):
        countersign.verify_receipt(issued.receipt, tool="pay", arguments=AMOUNTS)


# --- where the tool runs ------------------------------------------------------------------


def test_a_gated_function_runs_with_its_receipt_and_requires_receipt_checks_it(
    live: LiveServer,
) -> None:
    guard = countersign.ReplayGuard()
    ran: list[tuple[Decimal, str | None]] = []

    @countersign.requires_receipt(tool="pay", issuer=live.url, replay_guard=guard)
    def pay(amount: Decimal) -> str:
        ran.append((amount, countersign.current_receipt()))
        return f"paid {amount}"

    with countersign.Client(live.url, TOKEN) as client:
        gated_pay = client.gated("pay", deadline=20)(pay)
        assert gated_pay(Decimal("12.50")) == "paid 12.50"
        ((amount, receipt),) = ran
        assert amount == Decimal("12.50")
        state = client.get(client.submit("pay", SMALL_PAYMENT))  # another call, its own receipt
        assert state["receipt"] not in (None, receipt)

    with pytest.raises(countersign.ReceiptMissing):
        pay(Decimal("12.50"))  # called directly: no receipt
    with countersign.receipt_context(receipt), pytest.raises(countersign.ReceiptReplayed):
        pay(Decimal("12.50"))  # its receipt again
    with (
        countersign.receipt_context(state["receipt"]),
        pytest.raises(countersign.ReceiptWrongArguments),
    ):
        pay(Decimal("99.00"))  # a receipt for other arguments
    assert len(ran) == 1


def test_an_approved_async_function_gets_the_receipt_of_its_approval(live: LiveServer) -> None:
    seen: list[dict[str, Any]] = []

    @countersign.requires_receipt(tool="pay", issuer=live.url)
    async def pay(amount: str) -> str:
        receipt = countersign.current_receipt()
        assert receipt is not None
        seen.append(json.loads(unb64(receipt.split(".")[1])))
        return "paid"

    async def scenario() -> str:
        async with countersign.AsyncClient(live.url, TOKEN) as client:
            gated = client.gated("pay", deadline=20)(pay)
            run = asyncio.ensure_future(gated(BIG_PAYMENT["amount"]))
            call_id = await asyncio.to_thread(_held_call_id, live)
            await asyncio.to_thread(_approve, live, call_id)
            return await run

    assert asyncio.run(scenario()) == "paid"
    (claims,) = seen
    assert (claims["status"], claims["approvals"][0]["by"]) == ("approved", APPROVER)


def _held_call_id(server: LiveServer) -> str:
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            pending = Call.objects.filter(status="pending").values_list("pk", flat=True).first()
            if pending is not None:
                return str(pending)
            time.sleep(0.05)
    finally:
        connection.close()  # this thread's connection, back to the pool
    raise AssertionError("nothing was held")


def _approve(server: LiveServer, call_id: str) -> None:
    approver = Approver(server, APPROVER, PASSWORD)
    try:
        assert approver.decide(call_id, approve=True, comment="ok") == 303
    finally:
        approver.close()


def test_a_receipt_for_the_largest_body_the_service_takes_verifies(
    issued: Call, keys: dict[str, Any], settings: Any
) -> None:
    """Arguments near COUNTERSIGN_MAX_BODY, every character escaped in JSON, still make a
    receipt the client reads (joserfc's own default limit is far below that)."""
    text = json.dumps({"memo": "\x01" * (settings.COUNTERSIGN_MAX_BODY // 8)})
    big = call_make(agent=issued.agent, tool="note", arguments=text)
    assert big.status == "allowed"
    assert len(big.receipt) > 1_000_000
    assert verify(big.receipt, keys, tool="note", arguments=text)
    assert verify(big.receipt, keys, tool="note", arguments=json.loads(text))
