"""Single sign-on's settings refuse what cannot work, without repeating the value; discovery
refuses a document that does not describe what this client needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from identity.config import (
    CLIENT_MISSING,
    DEFAULT_SCOPES,
    ISSUER_NOT_SECURE,
    NO_OPENID_SCOPE,
    NOBODY_COULD_LOG_IN,
    SsoSettings,
    sso_settings,
)
from identity.discovery import Provider, SsoUnavailable, provider_of

ISSUER = "https://login.example.com/realms/staff"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "OIDC_ISSUER",
        "OIDC_CLIENT_ID",
        "OIDC_CLIENT_SECRET",
        "OIDC_NAME",
        "OIDC_GROUPS_CLAIM",
        "OIDC_SCOPES",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_issuer_is_no_single_sign_on(environment: pytest.MonkeyPatch) -> None:
    assert sso_settings(password_login=True) == SsoSettings()


def test_the_defaults(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("OIDC_ISSUER", ISSUER)
    environment.setenv("OIDC_CLIENT_ID", "countersign")
    environment.setenv("OIDC_CLIENT_SECRET", "s3cret")
    found = sso_settings(password_login=False)
    assert (found.issuer, found.name, found.groups_claim, found.scopes) == (
        ISSUER,
        "SSO",
        "groups",
        DEFAULT_SCOPES,
    )


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OIDC_ISSUER": "http://login.example.com/s3cret"}, ISSUER_NOT_SECURE),
        ({"OIDC_ISSUER": "login.example.com"}, ISSUER_NOT_SECURE),
        ({"OIDC_ISSUER": ISSUER, "OIDC_CLIENT_ID": "countersign"}, CLIENT_MISSING),
        (
            {
                "OIDC_ISSUER": ISSUER,
                "OIDC_CLIENT_ID": "countersign",
                "OIDC_CLIENT_SECRET": "s3cret",
                "OIDC_SCOPES": "email profile",
            },
            NO_OPENID_SCOPE,
        ),
    ],
)
def test_what_cannot_work_stops_start_up(
    environment: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    for name, value in variables.items():
        environment.setenv(name, value)
    with pytest.raises(ImproperlyConfigured) as refused:
        sso_settings(password_login=True)
    assert str(refused.value) == message
    assert "s3cret" not in str(refused.value)


def test_passwords_off_needs_single_sign_on(environment: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        sso_settings(password_login=False)
    assert str(refused.value) == NOBODY_COULD_LOG_IN


def test_the_server_does_not_start_with_passwords_off_and_no_issuer() -> None:
    env = {"COUNTERSIGN_PASSWORD_LOGIN": "0", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert NOBODY_COULD_LOG_IN in result.stderr


def _document(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/auth",
        "token_endpoint": f"{ISSUER}/token",
        "userinfo_endpoint": f"{ISSUER}/userinfo",
        "jwks_uri": f"{ISSUER}/certs",
        "response_types_supported": ["code", "id_token"],
        "id_token_signing_alg_values_supported": ["PS256", "ES256", "RS256"],
    }
    document.update(changes)
    return {name: value for name, value in document.items() if value is not None}


def test_a_document_gives_the_endpoints_and_the_best_algorithm() -> None:
    provider = provider_of(issuer=ISSUER, document=_document())
    assert provider == Provider(
        issuer=ISSUER,
        authorization_endpoint=f"{ISSUER}/auth",
        token_endpoint=f"{ISSUER}/token",
        userinfo_endpoint=f"{ISSUER}/userinfo",
        jwks_uri=f"{ISSUER}/certs",
        signing_algorithm="RS256",
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"issuer": "https://elsewhere.example.com"},
        {"token_endpoint": None},
        {"jwks_uri": "http://login.example.com/certs"},
        {"response_types_supported": ["id_token"]},
        {"token_endpoint_auth_methods_supported": ["client_secret_post"]},
        {"code_challenge_methods_supported": ["plain"]},
        {"id_token_signing_alg_values_supported": ["HS256", "none"]},
    ],
)
def test_a_document_missing_what_this_client_needs_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(SsoUnavailable):
        provider_of(issuer=ISSUER, document=_document(**changes))


def test_a_document_that_is_no_object_is_refused() -> None:
    with pytest.raises(SsoUnavailable):
        provider_of(issuer=ISSUER, document=["not", "an", "object"])
