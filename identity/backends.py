"""Single sign-on's authentication backend: mozilla-django-oidc's, with the endpoints from the
issuer's discovery document (identity/discovery.py) instead of settings.

The library exchanges the code (with the PKCE verifier, the client authenticating with
``client_secret_basic``), checks the ID token's signature with the provider's published keys
and its nonce, and reads the userinfo. Here, PyJWT also checks the token's issuer, audience
and expiry, which the library leaves out; the userinfo must be about the token's subject; and
the person is found by issuer and ``sub`` (identity/services.py), never by name or email.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from identity.discovery import Provider, sso_provider
from identity.passkeys import PasskeyRefused, passkey_sign_in
from identity.services import sso_user_sign_in

logger = logging.getLogger(__name__)

CALLBACK = "sso-callback"
# Seconds each request to the provider (token, keys, userinfo) may take.
PROVIDER_TIMEOUT = 10
# Seconds of clock difference tolerated between this server and the provider.
CLOCK_LEEWAY = 60
ID_TOKEN_NOT_VALID = "the ID token is not valid"  # noqa: S105 (a message)
ID_TOKEN_ALGORITHM = "the ID token is not signed with the provider's algorithm"  # noqa: S105
USERINFO_ANOTHER_SUBJECT = "the userinfo is about another subject than the ID token"
# Set on a request whose passkey sign-in failed: why, for the answer (a name of ours).
PASSKEY_REFUSED = "countersign_passkey_refused"


def callback_url() -> str:
    """The redirect URI registered at the provider: from ``COUNTERSIGN_PUBLIC_URL``, never the
    request's Host."""
    return settings.COUNTERSIGN_PUBLIC_URL + reverse(CALLBACK)


def library_setting(name: str, *default: Any) -> Any:
    """The library's settings, fixed here rather than left to each installation."""
    fixed: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": settings.OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": settings.OIDC_CLIENT_SECRET,
        "OIDC_RP_SCOPES": settings.OIDC_SCOPES,
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_USE_NONCE": True,
        "OIDC_TOKEN_USE_BASIC_AUTH": True,
        "OIDC_TIMEOUT": PROVIDER_TIMEOUT,
        "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK,
        "OIDC_CREATE_USER": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        "OIDC_ALLOW_UNSECURED_JWT": False,
        "OIDC_VERIFY_SSL": True,
        "LOGIN_REDIRECT_URL": "/",
        "LOGIN_REDIRECT_URL_FAILURE": reverse("login") + "?sso=failed",
    }
    if name in fixed:
        return fixed[name]
    return import_from_settings(name, *default)  # type: ignore[no-untyped-call]


class SsoBackend(OIDCAuthenticationBackend):
    """Takes the callback's nonce and code verifier, never a username and password: a
    password login does not reach it (``authenticate``'s signature refuses those)."""

    provider: Provider

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Made for every request of a signed-in person (``get_user``): nothing is read here.
        ModelBackend.__init__(self, *args, **kwargs)
        self.UserModel = get_user_model()

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def authenticate(  # type: ignore[override]
        self,
        request: HttpRequest | None,
        nonce: str | None = None,
        code_verifier: str | None = None,
    ) -> User | None:
        if request is None or not nonce or not code_verifier:
            return None
        self.provider = sso_provider()
        self.OIDC_OP_TOKEN_ENDPOINT = self.provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = self.provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = self.provider.jwks_uri
        self.OIDC_RP_SIGN_ALGO = self.provider.signing_algorithm
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        user: User | None = super().authenticate(  # type: ignore[no-untyped-call]
            request, nonce=nonce, code_verifier=code_verifier
        )
        return user

    def get_token(self, payload: dict[str, Any]) -> Any:
        payload["redirect_uri"] = callback_url()
        return super().get_token(payload)  # type: ignore[no-untyped-call]

    def get_payload_data(self, token: bytes | str, key: Any) -> Any:
        """The ID token's claims, its signature, issuer, audience and expiry checked."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
                raise SuspiciousOperation(ID_TOKEN_ALGORITHM)
            return jwt.decode(
                token,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=settings.OIDC_CLIENT_ID,
                issuer=self.provider.issuer,
                leeway=CLOCK_LEEWAY,
                options={"require": ["iss", "aud", "sub", "exp", "iat"]},
            )
        except jwt.PyJWTError:
            raise SuspiciousOperation(ID_TOKEN_NOT_VALID) from None

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        userinfo = self.get_userinfo(access_token, id_token, payload)  # type: ignore[no-untyped-call]
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation(USERINFO_ANOTHER_SUBJECT)
        # The ID token's claims, and the userinfo's beside them: providers put groups in one
        # or the other.
        claims = {**payload, **userinfo}
        try:
            return sso_user_sign_in(
                issuer=self.provider.issuer,
                claims=claims,
                groups_claim=settings.OIDC_GROUPS_CLAIM,
            )
        except ValueError as problem:
            raise SuspiciousOperation(str(problem)) from None

    def get_user(self, user_id: int) -> User | None:
        """With single sign-on switched off, the sessions it opened end."""
        if not settings.OIDC_ISSUER:
            return None
        found: User | None = ModelBackend.get_user(self, user_id)
        return found


def passkey_refusal(request: HttpRequest) -> str:
    """Why ``PasskeyBackend`` signed nobody in for this request, in fixed words; empty when
    it was not asked (the throttle refused the sign-in first)."""
    return str(getattr(request, PASSKEY_REFUSED, ""))


class PasskeyBackend(BaseBackend):
    """Passkey sign-in (``identity.passkeys.passkey_sign_in``), reached through Django's
    ``authenticate`` as a password login is: the throttle before it counts a failure and
    refuses a locked-out username and address (approvals/accounts/throttle.py), and axes
    logs the sign-in. ``username`` is whose passkey the assertion names, for the throttle;
    the assertion decides who signs in. Keeps the session of an active person."""

    def authenticate(  # type: ignore[override]
        self,
        request: HttpRequest | None,
        username: str | None = None,
        passkey_nonce: str | None = None,
        passkey_credential: str | None = None,
    ) -> User | None:
        if request is None or passkey_nonce is None or passkey_credential is None:
            return None
        try:
            user = passkey_sign_in(nonce=passkey_nonce, credential=passkey_credential)
        except PasskeyRefused as refused:
            setattr(request, PASSKEY_REFUSED, refused.message)
            return None
        return user

    def get_user(self, user_id: int) -> User | None:
        return User.objects.filter(pk=user_id, is_active=True).first()
