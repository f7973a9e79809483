"""The Ed25519 key that signs receipts and audit heads, the older public keys still published,
and the one signing function (docs/receipts.md, "Keys").

The keys are read once, when the settings are (``config/settings.py``): a key that is
missing, malformed or not Ed25519 stops start-up with an error naming the setting and the
file, and a running server never meets one. With no ``COUNTERSIGN_SIGNING_KEY``, a key is
generated on first start into ``var/signing_key.pem``, readable by its owner only.

Signing and verifying go through ``joserfc`` with a registry that knows ``EdDSA`` alone, so
no header can ask for another algorithm.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from joserfc import jws
from joserfc.errors import JoseError, UnsupportedAlgorithmError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import OKPKey
from joserfc.jws import JWSRegistry

ALGORITHM = "EdDSA"
RECEIPT_TYPE = "countersign-receipt+jwt"
AUDIT_HEAD_TYPE = "countersign-audit-head+jwt"

SIGNING_SETTING = "COUNTERSIGN_SIGNING_KEY"
VERIFY_SETTING = "COUNTERSIGN_VERIFY_KEYS"
MAKE_KEY = "openssl genpkey -algorithm ed25519 -out signing_key.pem"
PUBLIC_OF = "openssl pkey -in old_signing_key.pem -pubout -out old_public_key.pem"

# Start-up errors: the file's path is the administrator's own text, never the key.
UNREADABLE = "{setting}: the key file {path} cannot be read ({reason})"
NOT_PRIVATE_PEM = (
    "{setting}: {path} is not an unencrypted PEM private key; make one with: " + MAKE_KEY
)
NOT_PUBLIC_PEM = (
    "{setting}: {path} is not a PEM public key; an older signing key's public half is made "
    "with: " + PUBLIC_OF
)
PRIVATE_AS_PUBLIC = (
    "{setting}: {path} holds a private key; publish only its public half, made with: " + PUBLIC_OF
)
NOT_ED25519 = "{setting}: {path} is not an Ed25519 key; receipts are signed with Ed25519 only"


class EdDSAOnly(JWSRegistry):
    """joserfc's registry narrowed to ``EdDSA``: any other ``alg`` is refused before a key is
    touched. RFC 9864 prefers the name ``Ed25519`` and joserfc warns about ``EdDSA`` on every
    use; the receipt's contract is RFC 8037's ``EdDSA`` with Ed25519 keys."""

    # A receipt carries the call's arguments whole, up to COUNTERSIGN_MAX_BODY and escaped.
    max_payload_length = 64 * 1024 * 1024

    def get_alg(self, name: str) -> JWSAlgModel:
        if name != ALGORITHM:
            raise UnsupportedAlgorithmError(f"only {ALGORITHM} is accepted")
        return self.algorithms[ALGORITHM]


EDDSA_ONLY = EdDSAOnly(algorithms=[ALGORITHM])


@dataclass(frozen=True, slots=True, repr=False)
class ReceiptKeys:
    """The signing key with its ``kid`` (RFC 7638 thumbprint), and every public key published
    in the JWKS, the signing key's first."""

    signing: OKPKey
    kid: str
    published: tuple[OKPKey, ...]

    def __repr__(self) -> str:  # never the private key, in a debug page or diffsettings
        return f"ReceiptKeys(kids={[key.thumbprint() for key in self.published]!r})"

    def jwks(self) -> dict[str, list[dict[str, Any]]]:
        """``GET /.well-known/jwks.json``'s document."""
        return {
            "keys": [
                {
                    **key.as_dict(private=False),
                    "kid": key.thumbprint(),
                    "use": "sig",
                    "alg": ALGORITHM,
                }
                for key in self.published
            ]
        }

    def public_key(self, kid: str) -> OKPKey | None:
        for key in self.published:
            if key.thumbprint() == kid:
                return key
        return None


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ImproperlyConfigured(
            UNREADABLE.format(setting=setting, path=path, reason=reason)
        ) from None


def _generate(path: Path) -> None:
    """A new key written aside, then linked into place: when several workers start at once,
    exactly one key wins and nobody reads a half-written file (as ``config.env.secret_key``)."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o600)  # the owner's alone, whatever the umask
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(draft)


def _private_key(setting: str, path: Path) -> Ed25519PrivateKey:
    data = _read(setting, path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ImproperlyConfigured(NOT_PRIVATE_PEM.format(setting=setting, path=path)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured(NOT_ED25519.format(setting=setting, path=path))
    return key


def _public_key(setting: str, path: Path) -> Ed25519PublicKey:
    data = _read(setting, path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        if b"PRIVATE KEY-----" in data:
            raise ImproperlyConfigured(
                PRIVATE_AS_PUBLIC.format(setting=setting, path=path)
            ) from None
        raise ImproperlyConfigured(NOT_PUBLIC_PEM.format(setting=setting, path=path)) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ImproperlyConfigured(NOT_ED25519.format(setting=setting, path=path))
    return key


def receipt_keys_load(*, signing: str, verify: Sequence[str], default: Path) -> ReceiptKeys:
    """The keys of ``COUNTERSIGN_SIGNING_KEY`` (``signing``, a path; empty: ``default``,
    generated there if missing) and ``COUNTERSIGN_VERIFY_KEYS`` (``verify``, paths of PEM
    public keys). ``ImproperlyConfigured`` for any key that cannot serve."""
    if signing:
        path, setting = Path(signing), SIGNING_SETTING
    else:
        path, setting = default, f"the generated key ({SIGNING_SETTING} unset)"
        if not path.exists():
            _generate(path)
    pem_key = _private_key(setting, path)
    private = OKPKey.import_key(pem_key)
    kid = private.thumbprint()
    published = [OKPKey.import_key(pem_key.public_key())]
    for older in verify:
        public = OKPKey.import_key(_public_key(VERIFY_SETTING, Path(older)))
        if public.thumbprint() not in {known.thumbprint() for known in published}:
            published.append(public)
    return ReceiptKeys(signing=private, kid=kid, published=tuple(published))


def receipt_keys() -> ReceiptKeys:
    """The keys this server signs and publishes with (read with the settings)."""
    keys: ReceiptKeys = settings.COUNTERSIGN_RECEIPT_KEYS
    return keys


def sign_jws(claims: Mapping[str, Any], typ: str) -> str:
    """``claims`` as a compact JWS signed with the current key: header ``{"alg": "EdDSA",
    "typ": typ, "kid": <the key's thumbprint>}``, payload the claims as compact JSON (UTF-8,
    no NaN). Used for receipts (``RECEIPT_TYPE``) and audit heads (``AUDIT_HEAD_TYPE``)."""
    keys = receipt_keys()
    header = {"alg": ALGORITHM, "typ": typ, "kid": keys.kid}
    payload = json.dumps(claims, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return jws.serialize_compact(header, payload.encode(), keys.signing, registry=EDDSA_ONLY)


class NotSigned(ValueError):
    """A JWS this server did not sign with one of its published keys, or not of the type
    asked for."""


def verify_jws(token: str, typ: str) -> dict[str, Any]:
    """The claims of a compact JWS signed by one of the published keys with header ``typ``
    (for tests and the server's own checks; tools use the client's ``verify_receipt``).
    ``NotSigned`` otherwise."""
    keys = receipt_keys()
    try:
        header = jws.extract_compact(token.encode(), registry=EDDSA_ONLY).headers()
    except (JoseError, ValueError) as error:
        raise NotSigned("not a compact JWS") from error
    key = keys.public_key(str(header.get("kid")))
    if key is None or header.get("typ") != typ:
        raise NotSigned("not signed by this server as " + typ)
    try:
        payload = jws.deserialize_compact(token, key, registry=EDDSA_ONLY).payload
    except (JoseError, ValueError) as error:
        raise NotSigned("not a JWS this server signed") from error
    claims = json.loads(payload)
    if not isinstance(claims, dict):
        raise NotSigned("the payload is not a JSON object")
    return claims
