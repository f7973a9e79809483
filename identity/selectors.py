"""What a login page offers (the password form, single sign-on, passkeys), and a person's
passkeys."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User

from identity.discovery import sso_ready
from identity.models import Passkey
from identity.passkeys import relying_party


@dataclass(frozen=True)
class SignInOffer:
    """``sso``: single sign-on is set up; ``available``: its provider can be used now (else
    the page says it is unavailable, and offers no way around it); ``password_off``: no
    password form."""

    name: str
    sso: bool
    available: bool
    password_off: bool
    passkeys: bool = False


def sign_in_offer() -> SignInOffer:
    sso = bool(settings.OIDC_ISSUER)
    return SignInOffer(
        name=settings.OIDC_NAME,
        sso=sso,
        available=sso and sso_ready(),
        password_off=not settings.COUNTERSIGN_PASSWORD_LOGIN,
        passkeys=passkeys_offered(),
    )


def passkeys_of(*, user: User) -> list[Passkey]:
    """A person's passkeys, the oldest first."""
    return list(Passkey.objects.filter(user=user).order_by("created", "pk"))


def passkeys_offered() -> bool:
    """Whether passkeys can be used here: ``COUNTERSIGN_PUBLIC_URL`` names a host."""
    return relying_party() is not None
