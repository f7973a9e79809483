"""What the receipts' tests share: the public keys as a verifier fetches them, and a second,
independent JOSE implementation (PyJWT) that every receipt must verify with."""

from __future__ import annotations

from typing import Any

import jwt
import pytest
from django.test import Client

JWKS_PATH = "/.well-known/jwks.json"


def jwks_fetched() -> dict[str, Any]:
    """The keys as a verifier fetches them, over HTTP, without any credentials."""
    response = Client().get(JWKS_PATH)
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def pyjwt_claims(receipt: str, *, jwks: dict[str, Any], issuer: str) -> dict[str, Any]:
    """The claims as PyJWT reads them: the key picked by the header's kid from the JWKS,
    EdDSA the only algorithm allowed, the issuer and every claim required."""
    header = jwt.get_unverified_header(receipt)
    keys = {key.key_id: key for key in jwt.PyJWKSet.from_dict(jwks).keys}
    claims: dict[str, Any] = jwt.decode(
        receipt,
        key=keys[header["kid"]],
        algorithms=["EdDSA"],
        issuer=issuer,
        options={"require": ["iss", "sub", "jti", "iat", "exp"]},
    )
    return claims


@pytest.fixture
def jwks(db: None) -> dict[str, Any]:
    return jwks_fetched()
