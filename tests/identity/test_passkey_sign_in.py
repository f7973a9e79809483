"""Sign in with a passkey is throttled and logged as a password login is (django-axes,
approvals/accounts/throttle.py): each failure counts for the passkey's username and the
client's address, the fifth locks the pair out (audited once, ``429``), a locked-out pair
is refused even the right passkey, and a sign-in is in axes' access log.

The assertions are a software authenticator's (tests/identity/authenticator.py), verified
for real."""

from __future__ import annotations

import json
from typing import Any

import pytest
from axes.models import AccessAttempt, AccessLog
from django.contrib.auth.models import User
from django.test import Client
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.accounts.lockouts import LOCKED_OUT_STATUS, locked_out_message
from approvals.models import AuditEntry
from identity.passkeys import (
    ASSERTION_NOT_VALID,
    PASSKEY_UNKNOWN,
    passkey_register,
    passkey_registration_begin,
)
from tests.factories import PASSWORD, user_make
from tests.identity.authenticator import SoftAuthenticator

pytestmark = pytest.mark.django_db
PUBLIC_URL = "https://countersign.example.test"
OPTIONS = "/passkeys/sign-in/options"
SIGN_IN = "/passkeys/sign-in"


@pytest.fixture(autouse=True)
def _public_url(settings: Any) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = PUBLIC_URL


@pytest.fixture
def alice() -> tuple[User, SoftAuthenticator]:
    user = user_make(username="alice")
    authenticator = SoftAuthenticator(PUBLIC_URL)
    nonce, options = passkey_registration_begin(user=user)
    passkey_register(
        user=user, nonce=nonce, credential=authenticator.register(options), name="Laptop"
    )
    return user, authenticator


def _forged(credential: str) -> str:
    """The assertion with one bit of its signature flipped."""
    made = json.loads(credential)
    signature = bytearray(base64url_to_bytes(made["response"]["signature"]))
    signature[-1] ^= 0x01
    made["response"]["signature"] = bytes_to_base64url(bytes(signature))
    return json.dumps(made)


def _sign_in(client: Client, authenticator: SoftAuthenticator, *, forge: bool = False) -> Any:
    options = client.post(OPTIONS).content.decode()
    credential = authenticator.assertion(options)
    return client.post(SIGN_IN, {"credential": _forged(credential) if forge else credential})


def _lockouts() -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=AuditEntry.Action.LOGIN_LOCKED_OUT))


def test_a_passkey_sign_in_is_in_the_access_log(alice: tuple[User, SoftAuthenticator]) -> None:
    user, authenticator = alice
    client = Client()
    response = _sign_in(client, authenticator)
    assert response.status_code == 200
    assert response.json() == {"next": "/"}
    assert client.session["_auth_user_id"] == str(user.pk)
    logged = AccessLog.objects.get()
    assert (logged.username, logged.path_info) == ("alice", SIGN_IN)


def test_the_fifth_failure_locks_out_and_then_the_right_passkey_is_refused(
    alice: tuple[User, SoftAuthenticator],
) -> None:
    _, authenticator = alice
    client = Client()
    failures = [_sign_in(client, authenticator, forge=True) for _ in range(5)]
    assert [r.status_code for r in failures] == [403, 403, 403, 403, LOCKED_OUT_STATUS]
    assert failures[0].content.decode() == ASSERTION_NOT_VALID
    locked = failures[-1]
    assert (locked["Content-Type"], locked.content.decode()) == (
        "text/plain",
        locked_out_message(),
    )
    assert locked["Retry-After"] == "900"
    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.failures_since_start) == ("alice", 5)
    [entry] = _lockouts()
    described = {"username": "alice", "ip_address": "127.0.0.1", "failures": 5}
    assert json.loads(entry.after) == described

    refused = _sign_in(client, authenticator)
    assert refused.status_code == LOCKED_OUT_STATUS
    assert "_auth_user_id" not in client.session
    assert len(_lockouts()) == 1  # audited once, when it began
    # The pair is locked out for passwords too, as any login of it is.
    password = Client().post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert password.status_code == LOCKED_OUT_STATUS


def test_a_password_lockout_holds_the_passkey_sign_in_too(
    alice: tuple[User, SoftAuthenticator],
) -> None:
    _, authenticator = alice
    client = Client()
    for attempt in range(5):
        client.post("/accounts/login/", {"username": "alice", "password": f"wrong {attempt}"})
    assert _sign_in(client, authenticator).status_code == LOCKED_OUT_STATUS
    assert "_auth_user_id" not in client.session


def test_a_sign_in_forgets_the_failures_before_it(alice: tuple[User, SoftAuthenticator]) -> None:
    _, authenticator = alice
    client = Client()
    assert _sign_in(client, authenticator, forge=True).status_code == 403
    assert AccessAttempt.objects.get().failures_since_start == 1
    assert _sign_in(client, authenticator).status_code == 200
    assert not AccessAttempt.objects.exists()


def test_an_unknown_passkey_counts_under_no_username(
    alice: tuple[User, SoftAuthenticator],
) -> None:
    stranger = SoftAuthenticator(PUBLIC_URL)
    client = Client()
    statuses = [_sign_in(client, stranger).status_code for _ in range(5)]
    assert statuses == [403, 403, 403, 403, LOCKED_OUT_STATUS]
    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.failures_since_start) == (None, 5)
    # alice's own passkey, from the same address, is not held by the stranger's failures.
    assert _sign_in(client, alice[1]).status_code == 200


def test_an_unknown_passkey_is_named_so(alice: tuple[User, SoftAuthenticator]) -> None:
    response = _sign_in(Client(), SoftAuthenticator(PUBLIC_URL))
    assert (response.status_code, response.content.decode()) == (403, PASSKEY_UNKNOWN)
