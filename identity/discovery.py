"""The identity provider's endpoints, from its discovery document
(``<OIDC_ISSUER>/.well-known/openid-configuration``).

Read at first use and again once it is ``FRESH_SECONDS`` old; a document that cannot be read,
or that does not describe what this client needs (the code flow, ``client_secret_basic``,
PKCE's S256, an ID token signature it can check), makes single sign-on unavailable: the login
page says so, ``/readyz`` reports it, and nobody is signed in. A failure is remembered for
``RETRY_SECONDS``, so that a provider that is down is not asked at every page.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from identity.config import url_secure_enough

logger = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/openid-configuration"
DISCOVERY_TIMEOUT = 3.0  # seconds: the login page and /readyz wait for it
FRESH_SECONDS = 300.0
RETRY_SECONDS = 15.0
# The ID token signatures this client checks (with the provider's published keys), best first.
SIGNING_ALGORITHMS = ("RS256", "ES256", "RS384", "ES384", "RS512", "ES512")
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")


class SsoUnavailable(Exception):
    """Single sign-on cannot be used now; the message says why, for the server's log."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str
    signing_algorithm: str


def _supports(document: dict[str, Any], field: str, value: str) -> bool:
    """Whether the document's list ``field`` names ``value``; an absent list says nothing
    against it (providers leave out what the specification lets them)."""
    listed = document.get(field)
    return listed is None or (isinstance(listed, list) and value in listed)


def provider_of(*, issuer: str, document: object) -> Provider:
    """The endpoints of a discovery document, checked against what this client needs."""
    if not isinstance(document, dict):
        raise SsoUnavailable("the discovery document is not a JSON object")
    if document.get("issuer") != issuer:
        raise SsoUnavailable("the discovery document names another issuer than OIDC_ISSUER")
    endpoints = {}
    for field in ENDPOINTS:
        url = document.get(field)
        if not isinstance(url, str) or not url_secure_enough(url.split("?", 1)[0]):
            raise SsoUnavailable(f"the discovery document's {field} is missing or not https")
        endpoints[field] = url
    if not _supports(document, "response_types_supported", "code"):
        raise SsoUnavailable("the provider does not offer the authorization code flow")
    if not _supports(document, "token_endpoint_auth_methods_supported", "client_secret_basic"):
        raise SsoUnavailable("the provider does not accept client_secret_basic")
    if not _supports(document, "code_challenge_methods_supported", "S256"):
        raise SsoUnavailable("the provider does not offer PKCE with S256")
    algorithms = document.get("id_token_signing_alg_values_supported")
    usable = [a for a in SIGNING_ALGORITHMS if isinstance(algorithms, list) and a in algorithms]
    if not usable:
        raise SsoUnavailable("the provider signs ID tokens with no algorithm this client checks")
    return Provider(issuer=issuer, signing_algorithm=usable[0], **endpoints)


def provider_discover(*, issuer: str) -> Provider:
    """Read and check the issuer's discovery document now."""
    url = issuer.rstrip("/") + WELL_KNOWN
    try:
        response = httpx.get(url, timeout=DISCOVERY_TIMEOUT, follow_redirects=False)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise SsoUnavailable(
            f"the discovery document could not be read ({type(error).__name__})"
        ) from None
    return provider_of(issuer=issuer, document=document)


_found: dict[str, tuple[float, Provider | SsoUnavailable]] = {}
_found_lock = threading.Lock()


def sso_provider() -> Provider:
    """The configured provider's endpoints, read again when stale; ``SsoUnavailable`` when
    there is no issuer or its document cannot be used."""
    issuer = settings.OIDC_ISSUER
    if not issuer:
        raise SsoUnavailable("single sign-on is not configured")
    now = time.monotonic()
    with _found_lock:
        cached = _found.get(issuer)
    if cached is not None:
        at, found = cached
        fresh = FRESH_SECONDS if isinstance(found, Provider) else RETRY_SECONDS
        if now - at < fresh:
            if isinstance(found, SsoUnavailable):
                raise found
            return found
    try:
        provider: Provider | SsoUnavailable = provider_discover(issuer=issuer)
    except SsoUnavailable as problem:
        logger.warning("single sign-on is unavailable: %s", problem)
        provider = problem
    with _found_lock:
        _found[issuer] = (now, provider)
    if isinstance(provider, SsoUnavailable):
        raise provider
    return provider


def sso_ready() -> bool:
    """Whether single sign-on, configured, can be used now (``/readyz``)."""
    try:
        sso_provider()
    except SsoUnavailable:
        return False
    return True


def sso_forget() -> None:
    """Forget what was read, so the next use reads the documents again (tests)."""
    with _found_lock:
        _found.clear()
