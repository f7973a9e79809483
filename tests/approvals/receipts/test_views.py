"""``GET /.well-known/jwks.json``: the public keys, current first, to anyone, cacheable."""

from __future__ import annotations

from typing import Any

from django.test import Client

from approvals.receipts.keys import receipt_keys
from tests.approvals.receipts.conftest import JWKS_PATH


def test_the_keys_are_public_cacheable_and_the_current_key_comes_first(db: None) -> None:
    response = Client().get(JWKS_PATH)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "public, max-age=300"
    assert response["Access-Control-Allow-Origin"] == "*"
    assert "Set-Cookie" not in response
    document: dict[str, Any] = response.json()
    assert document == receipt_keys().jwks()
    assert document["keys"][0]["kid"] == receipt_keys().kid
    assert all("d" not in key for key in document["keys"])


def test_only_reads_are_answered(db: None) -> None:
    assert Client().head(JWKS_PATH).status_code == 200
    assert Client().post(JWKS_PATH).status_code == 405
