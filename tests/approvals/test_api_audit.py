"""``GET /api/v1/audit`` and ``GET /api/v1/audit/head`` (docs/receipts.md, "The audit chain"):
off without ``COUNTERSIGN_AUDIT_TOKEN``, only its bearer token let in, pages through the whole
log with no gap or repeat, and a head signed with the receipts key that an independent JOSE
library verifies against the published JWKS."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import jwt
import pytest
import rfc8785
from django.test import Client

from approvals.api.audit import AUDIT_UNAUTHENTICATED
from approvals.audit_chain import GENESIS_HASH
from approvals.models import AuditEntry
from approvals.services.audit import audit_record
from tests.factories import agent_with_token

TOKEN = "audit-token-for-the-siem-0123456789"
HEAD_TYPE = "countersign-audit-head+jwt"
ENTRIES = 23
HOSTILE = '<script>\u0001\u2028é"\\'


@pytest.fixture
def audit_on(settings: Any) -> str:
    settings.COUNTERSIGN_AUDIT_TOKEN = TOKEN
    return TOKEN


@pytest.fixture
def log(db: None) -> list[AuditEntry]:
    return [
        audit_record(
            action=AuditEntry.Action.CALL_EXPIRED,
            object_type=AuditEntry.ObjectType.CALL,
            object_id=n,
            after=f"{HOSTILE} {n}",
        )
        for n in range(1, ENTRIES + 1)
    ]


def _get(path: str, token: str | None = TOKEN, authorization: str | None = None) -> Any:
    if token is not None:
        authorization = f"Bearer {token}"
    headers = {} if authorization is None else {"Authorization": authorization}
    return Client().get(path, headers=headers)


@pytest.mark.parametrize("path", ["/api/v1/audit", "/api/v1/audit/head"])
def test_without_the_setting_the_audit_api_is_not_there(
    log: list[AuditEntry], path: str, settings: Any
) -> None:
    settings.COUNTERSIGN_AUDIT_TOKEN = ""
    for token in (None, TOKEN, ""):
        response = _get(path, token)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("path", ["/api/v1/audit", "/api/v1/audit/head"])
def test_a_missing_or_wrong_token_is_a_401(log: list[AuditEntry], audit_on: str, path: str) -> None:
    _, agent_token = agent_with_token()
    for token in (None, "", TOKEN + "x", TOKEN[:-1], agent_token, TOKEN.upper()):
        response = _get(path, token)
        assert response.status_code == 401, token
        assert response["WWW-Authenticate"] == "Bearer"
        assert response.json() == {
            "error": {"code": "unauthenticated", "message": AUDIT_UNAUTHENTICATED}
        }
    assert _get(path, None, authorization=f"Basic {TOKEN}").status_code == 401
    assert _get(path, TOKEN).status_code == 200


@pytest.mark.parametrize(
    ("query", "name", "expected"),
    [
        ("after=-1", "after", "0 to 9223372036854775807"),
        ("after=1.5", "after", "0 to 9223372036854775807"),
        ("after=9223372036854775808", "after", "0 to 9223372036854775807"),
        ("after=%3Cscript%3E", "after", "0 to 9223372036854775807"),
        ("after=", "after", "0 to 9223372036854775807"),
        ("limit=0", "limit", "1 to 1000"),
        ("limit=1001", "limit", "1 to 1000"),
        ("limit=ten", "limit", "1 to 1000"),
    ],
)
def test_a_bad_after_or_limit_is_a_400_naming_it(
    log: list[AuditEntry], audit_on: str, query: str, name: str, expected: str
) -> None:
    response = _get(f"/api/v1/audit?{query}")
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == f"The query parameter {name} is malformed or out of range ({expected})."
    assert "script" not in message


def test_a_parameter_given_twice_is_a_400(log: list[AuditEntry], audit_on: str) -> None:
    response = _get("/api/v1/audit?after=1&after=2")
    assert response.status_code == 400
    assert (
        response.json()["error"]["message"] == "The query parameter after is given more than once."
    )


def test_the_export_pages_through_the_whole_log_with_no_gap_or_repeat(
    log: list[AuditEntry], audit_on: str
) -> None:
    seen: list[int] = []
    after, pages = 0, 0
    while True:
        response = _get(f"/api/v1/audit?after={after}&limit=5")
        assert response.status_code == 200
        assert response["Cache-Control"] == "no-store"
        body = response.json()
        pages += 1
        if not body["items"]:
            assert body["next_after"] == after
            break
        seen += [item["seq"] for item in body["items"]]
        assert body["next_after"] == body["items"][-1]["seq"]
        after = body["next_after"]
    assert seen == list(range(1, ENTRIES + 1))
    assert pages == 6  # five full pages of 5… the fifth with 3, then the empty one


def test_an_exported_item_is_checked_by_an_outsider(log: list[AuditEntry], audit_on: str) -> None:
    """From the export alone: each item's hash recomputed with an independent RFC 8785
    implementation, each linked to the one before, the first to the genesis."""
    items = _get("/api/v1/audit?limit=1000").json()["items"]
    previous = GENESIS_HASH
    for item in items:
        assert set(item) == {
            "seq",
            "at",
            "actor",
            "action",
            "call",
            "details",
            "prev_hash",
            "hash",
        }
        assert item["prev_hash"] == previous
        content = {k: v for k, v in item.items() if k not in ("prev_hash", "hash")}
        digest = hashlib.sha256(item["prev_hash"].encode() + rfc8785.dumps(content))
        assert digest.hexdigest() == item["hash"]
        previous = item["hash"]
    first = items[0]
    assert first["call"] == "1"
    assert first["details"]["after"] == f"{HOSTILE} 1"
    assert first["actor"] == {"user_id": None, "username": "", "agent_id": None}


def test_the_default_page_is_100(db: None, audit_on: str) -> None:
    for n in range(105):
        audit_record(
            action=AuditEntry.Action.CALL_EXPIRED,
            object_type=AuditEntry.ObjectType.CALL,
            object_id=n,
        )
    body = _get("/api/v1/audit").json()
    assert len(body["items"]) == 100
    assert body["next_after"] == 100


def _verified_head(head: str) -> dict[str, Any]:
    """The head's claims, verified by PyJWT (not the server's JOSE library) against the keys
    published at /.well-known/jwks.json."""
    jwks = Client().get("/.well-known/jwks.json").json()
    header = jwt.get_unverified_header(head)
    assert header["alg"] == "EdDSA"
    assert header["typ"] == HEAD_TYPE
    (key,) = [k for k in jwks["keys"] if k["kid"] == header["kid"]]
    public = jwt.PyJWK.from_dict(key)
    claims: dict[str, Any] = jwt.decode(head, key=public, algorithms=["EdDSA"])
    return claims


def test_the_head_is_signed_and_names_the_latest_entry(
    log: list[AuditEntry], audit_on: str, settings: Any
) -> None:
    before = int(time.time())
    response = _get("/api/v1/audit/head")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    claims = _verified_head(response.json()["head"])
    assert (claims["seq"], claims["hash"]) == (ENTRIES, log[-1].hash)
    assert before <= claims["iat"] <= int(time.time())
    assert claims["iss"] == settings.COUNTERSIGN_PUBLIC_URL


def test_a_changed_head_does_not_verify(log: list[AuditEntry], audit_on: str) -> None:
    head = _get("/api/v1/audit/head").json()["head"]
    protected, payload, signature = head.split(".")
    claims = json.loads(jwt.utils.base64url_decode(payload))
    claims["seq"] = ENTRIES + 5
    forged_payload = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    with pytest.raises(jwt.InvalidSignatureError):
        _verified_head(f"{protected}.{forged_payload}.{signature}")


def test_the_head_of_an_empty_log_is_the_genesis(db: None, audit_on: str) -> None:
    claims = _verified_head(_get("/api/v1/audit/head").json()["head"])
    assert (claims["seq"], claims["hash"]) == (0, GENESIS_HASH)


def test_the_openapi_document_lists_the_audit_routes(db: None) -> None:
    paths = Client().get("/api/v1/openapi.json").json()["paths"]
    assert {"/api/v1/audit", "/api/v1/audit/head"} <= set(paths)
    listed = paths["/api/v1/audit"]["get"]
    assert {p["name"] for p in listed["parameters"]} == {"after", "limit"}
    assert set(listed["responses"]) == {"200", "400", "401", "404"}
