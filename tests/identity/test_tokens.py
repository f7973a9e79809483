"""The ID token checks added to the library's: issuer, audience, expiry and the algorithm the
provider's document names, each refused when wrong (the provider in conftest.py only ever
issues good tokens)."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation

from identity.backends import SsoBackend
from identity.discovery import Provider

ISSUER = "https://login.example.com"
CLIENT_ID = "countersign"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def backend(settings: Any) -> SsoBackend:
    settings.OIDC_CLIENT_ID = CLIENT_ID
    found = SsoBackend()
    found.provider = Provider(
        issuer=ISSUER,
        authorization_endpoint=f"{ISSUER}/auth",
        token_endpoint=f"{ISSUER}/token",
        userinfo_endpoint=f"{ISSUER}/userinfo",
        jwks_uri=f"{ISSUER}/certs",
        signing_algorithm="RS256",
    )
    found.OIDC_RP_SIGN_ALGO = "RS256"
    return found


def token(**changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": CLIENT_ID, "sub": "u-1", "iat": now, "exp": now + 300}
    claims.update(changes)
    return jwt.encode(
        {name: value for name, value in claims.items() if value is not None}, KEY, "RS256"
    )


def test_a_good_token_is_read(backend: SsoBackend) -> None:
    assert backend.get_payload_data(token(), KEY.public_key())["sub"] == "u-1"


@pytest.mark.parametrize(
    "changes",
    [
        {"iss": "https://elsewhere.example.com"},
        {"aud": "another-client"},
        {"exp": int(time.time()) - 3600},
        {"exp": None},
        {"iat": None},
    ],
)
def test_a_token_for_someone_else_or_out_of_date_is_refused(
    backend: SsoBackend, changes: dict[str, Any]
) -> None:
    with pytest.raises(SuspiciousOperation):
        backend.get_payload_data(token(**changes), KEY.public_key())


def test_a_token_of_another_algorithm_is_refused(backend: SsoBackend) -> None:
    forged = jwt.encode({"iss": ISSUER, "aud": CLIENT_ID, "sub": "u-1"}, "a" * 32, "HS256")
    with pytest.raises(SuspiciousOperation):
        backend.get_payload_data(forged, KEY.public_key())
