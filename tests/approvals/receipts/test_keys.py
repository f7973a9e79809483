"""The signing keys: generated once, private to their owner; read from
COUNTERSIGN_SIGNING_KEY with older public keys from COUNTERSIGN_VERIFY_KEYS; any key that
cannot serve stops start-up naming the setting and the file; a rotation keeps receipts signed
before it verifying for as long as the old key is published."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.exceptions import ImproperlyConfigured

import countersign
from approvals.receipts.keys import (
    AUDIT_HEAD_TYPE,
    RECEIPT_TYPE,
    NotSigned,
    receipt_keys_load,
    sign_jws,
    verify_jws,
)
from tests.approvals.receipts.conftest import jwks_fetched, pyjwt_claims
from tests.factories import agent_make, call_make, payment, rule_make
from tests.live import ROOT

NO_PASSWORD = serialization.NoEncryption()


def private_pem(path: Path, key: Any = None, *, password: bytes | None = None) -> Path:
    key = key or Ed25519PrivateKey.generate()
    encryption = (
        NO_PASSWORD if password is None else serialization.BestAvailableEncryption(password)
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def public_pem(path: Path, private: Path) -> Path:
    key = serialization.load_pem_private_key(private.read_bytes(), password=None)
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def test_a_key_is_generated_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    default = tmp_path / "var" / "signing_key.pem"
    first = receipt_keys_load(signing="", verify=[], default=default)
    assert stat.S_IMODE(default.stat().st_mode) == 0o600
    again = receipt_keys_load(signing="", verify=[], default=default)
    assert first.kid == again.kid
    (published,) = first.jwks()["keys"]
    assert published.keys() == {"kty", "crv", "x", "kid", "use", "alg"}
    assert (published["kty"], published["crv"], published["use"], published["alg"]) == (
        "OKP",
        "Ed25519",
        "sig",
        "EdDSA",
    )
    assert published["kid"] == first.kid
    assert "d" not in published  # never the private half
    assert "PRIVATE" not in repr(first)


def test_a_configured_key_is_used_and_never_replaced(tmp_path: Path) -> None:
    configured = private_pem(tmp_path / "key.pem")
    default = tmp_path / "var" / "signing_key.pem"
    keys = receipt_keys_load(signing=str(configured), verify=[], default=default)
    assert not default.exists()
    assert keys.kid == receipt_keys_load(signing=str(configured), verify=[], default=default).kid


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda path: None, "cannot be read"),
        (lambda path: path.write_text("not a key at all"), "not an unencrypted PEM private key"),
        (lambda path: private_pem(path, password=b"secret"), "not an unencrypted PEM"),
        (
            lambda path: private_pem(path, rsa.generate_private_key(65537, 2048)),
            "not an Ed25519 key",
        ),
        (
            lambda path: private_pem(path, ec.generate_private_key(ec.SECP256R1())),
            "not an Ed25519 key",
        ),
    ],
    ids=["missing", "garbage", "encrypted", "rsa", "ec"],
)
def test_a_signing_key_that_cannot_serve_is_refused_by_name(
    tmp_path: Path, make: Any, says: str
) -> None:
    path = tmp_path / "key.pem"
    make(path)
    with pytest.raises(ImproperlyConfigured, match=says) as refused:
        receipt_keys_load(signing=str(path), verify=[], default=tmp_path / "default.pem")
    assert "COUNTERSIGN_SIGNING_KEY" in str(refused.value)
    assert str(path) in str(refused.value)


def test_a_verify_key_must_be_an_ed25519_public_key(tmp_path: Path) -> None:
    signing = str(private_pem(tmp_path / "key.pem"))
    old_private = private_pem(tmp_path / "old.pem")
    with pytest.raises(ImproperlyConfigured, match="holds a private key") as refused:
        receipt_keys_load(signing=signing, verify=[str(old_private)], default=tmp_path / "d.pem")
    assert "COUNTERSIGN_VERIFY_KEYS" in str(refused.value)
    ec_public = tmp_path / "ec.pub"
    ec_public.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ImproperlyConfigured, match="not an Ed25519 key"):
        receipt_keys_load(signing=signing, verify=[str(ec_public)], default=tmp_path / "d.pem")
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ImproperlyConfigured, match="not a PEM public key"):
        receipt_keys_load(signing=signing, verify=[str(garbage)], default=tmp_path / "d.pem")


@pytest.mark.parametrize("setting", ["COUNTERSIGN_SIGNING_KEY", "COUNTERSIGN_VERIFY_KEYS"])
def test_a_bad_key_stops_start_up(tmp_path: Path, setting: str) -> None:
    bad = tmp_path / "bad.pem"
    private_pem(bad, rsa.generate_private_key(65537, 2048))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", setting: str(bad)}
    started = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert setting in started.stderr
    assert "ImproperlyConfigured" in started.stderr


def test_a_rotation_keeps_older_receipts_verifying(tmp_path: Path, settings: Any, db: None) -> None:
    """The key is replaced and the old one's public half published: receipts signed before
    the rotation verify (PyJWT and the client), new ones are signed with the new key, listed
    first. Once the old key is no longer published, its receipts are refused."""
    settings.COUNTERSIGN_PUBLIC_URL = issuer = "https://countersign.example"
    old, new = private_pem(tmp_path / "old.pem"), private_pem(tmp_path / "new.pem")
    default = tmp_path / "unused.pem"
    settings.COUNTERSIGN_RECEIPT_KEYS = receipt_keys_load(
        signing=str(old), verify=[], default=default
    )
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    agent = agent_make()
    before = call_make(agent=agent, arguments=payment("10.00"))

    settings.COUNTERSIGN_RECEIPT_KEYS = rotated = receipt_keys_load(
        signing=str(new), verify=[str(public_pem(tmp_path / "old.pub", old))], default=default
    )
    after = call_make(agent=agent, arguments=payment("20.00"))
    jwks = jwks_fetched()
    assert [key["kid"] for key in jwks["keys"]] == [key.thumbprint() for key in rotated.published]
    assert jwks["keys"][0]["kid"] == rotated.kid
    for call in (before, after):
        assert pyjwt_claims(call.receipt, jwks=jwks, issuer=issuer)["sub"] == str(call.pk)
        countersign.verify_receipt(call.receipt, tool="pay", arguments=call.arguments, jwks=jwks)

    settings.COUNTERSIGN_RECEIPT_KEYS = receipt_keys_load(
        signing=str(new), verify=[], default=default
    )
    retired = jwks_fetched()
    with pytest.raises(countersign.ReceiptUnknownKey):
        countersign.verify_receipt(
            before.receipt, tool="pay", arguments=before.arguments, jwks=retired
        )


def test_sign_jws_signs_what_verify_jws_reads_and_nothing_else(tmp_path: Path) -> None:
    head = sign_jws({"seq": 7, "hash": "ab" * 32, "iat": 1}, AUDIT_HEAD_TYPE)
    assert verify_jws(head, AUDIT_HEAD_TYPE) == {"seq": 7, "hash": "ab" * 32, "iat": 1}
    with pytest.raises(NotSigned):  # an audit head is never a receipt
        verify_jws(head, RECEIPT_TYPE)
    header, payload, signature = head.split(".")
    with pytest.raises(NotSigned):
        verify_jws(f"{header}.{payload}.{signature[:-4]}AAAA", AUDIT_HEAD_TYPE)
    with pytest.raises(NotSigned):
        verify_jws("not a jws", AUDIT_HEAD_TYPE)
