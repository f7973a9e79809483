"""The single sign-on settings, read from the environment by config/settings.py. A value that
cannot work stops start-up with a message naming the variable, never repeating the value (the
secret is one of them)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import env_str

DEFAULT_NAME = "SSO"
DEFAULT_GROUPS_CLAIM = "groups"
DEFAULT_SCOPES = "openid email profile"
NAME_MAX = 64

ISSUER_NOT_SECURE = (
    "OIDC_ISSUER must be an https:// URL without a query or fragment "
    "(http:// only on this machine's loopback address)"
)
CLIENT_MISSING = "OIDC_ISSUER is set, so OIDC_CLIENT_ID and OIDC_CLIENT_SECRET must be too"
NO_OPENID_SCOPE = "OIDC_SCOPES must include openid"
NAME_TOO_LONG = f"OIDC_NAME must be at most {NAME_MAX} characters"
NOBODY_COULD_LOG_IN = (
    "COUNTERSIGN_PASSWORD_LOGIN=0 needs single sign-on (OIDC_ISSUER): otherwise nobody could log in"
)


@dataclass(frozen=True)
class SsoSettings:
    """``issuer`` empty: no single sign-on."""

    issuer: str = ""
    client_id: str = ""
    client_secret: str = ""
    name: str = DEFAULT_NAME
    groups_claim: str = DEFAULT_GROUPS_CLAIM
    scopes: str = DEFAULT_SCOPES


def url_secure_enough(url: str) -> bool:
    """An https:// URL, or http:// to the loopback address (an identity provider run on the
    same machine, as in development and the tests)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if not parts.hostname or parts.query or parts.fragment:
        return False
    if parts.scheme == "https":
        return True
    if parts.scheme != "http":
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def sso_settings(*, password_login: bool) -> SsoSettings:
    """``OIDC_ISSUER`` and the rest; ``password_login`` off needs an issuer."""
    issuer = env_str("OIDC_ISSUER", "").strip()
    if not issuer:
        if not password_login:
            raise ImproperlyConfigured(NOBODY_COULD_LOG_IN)
        return SsoSettings()
    if not url_secure_enough(issuer):
        raise ImproperlyConfigured(ISSUER_NOT_SECURE)
    client_id = env_str("OIDC_CLIENT_ID", "").strip()
    client_secret = env_str("OIDC_CLIENT_SECRET", "").strip()
    if not (client_id and client_secret):
        raise ImproperlyConfigured(CLIENT_MISSING)
    name = env_str("OIDC_NAME", "").strip() or DEFAULT_NAME
    if len(name) > NAME_MAX:
        raise ImproperlyConfigured(NAME_TOO_LONG)
    scopes = " ".join(env_str("OIDC_SCOPES", "").split()) or DEFAULT_SCOPES
    if "openid" not in scopes.split():
        raise ImproperlyConfigured(NO_OPENID_SCOPE)
    return SsoSettings(
        issuer=issuer,
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        groups_claim=env_str("OIDC_GROUPS_CLAIM", "").strip() or DEFAULT_GROUPS_CLAIM,
        scopes=scopes,
    )
