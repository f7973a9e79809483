"""What a login page offers: the password form, single sign-on, or both."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from identity.discovery import sso_ready


@dataclass(frozen=True)
class SignInOffer:
    """``sso``: single sign-on is set up; ``available``: its provider can be used now (else
    the page says it is unavailable, and offers no way around it); ``password_off``: no
    password form."""

    name: str
    sso: bool
    available: bool
    password_off: bool


def sign_in_offer() -> SignInOffer:
    sso = bool(settings.OIDC_ISSUER)
    return SignInOffer(
        name=settings.OIDC_NAME,
        sso=sso,
        available=sso and sso_ready(),
        password_off=not settings.COUNTERSIGN_PASSWORD_LOGIN,
    )
