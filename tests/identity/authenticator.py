"""A software authenticator for in-process tests: a P-256 key that answers the server's
WebAuthn options as a platform authenticator would (user present and verified, attestation
``none``), so that registration and assertions go through py_webauthn's verification for
real. The browser tests use Chromium's virtual authenticator instead."""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

# Authenticator data flags: user present, user verified, attested credential data.
UP, UV, AT = 0x01, 0x04, 0x40
AAGUID = bytes(16)


class SoftAuthenticator:
    """One credential, made at ``register`` and used by ``assertion``; the counter moves on
    at each use."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = secrets.token_bytes(16)
        self.user_handle = b""
        self.sign_count = 0

    @property
    def id(self) -> str:
        return bytes_to_base64url(self.credential_id)

    def _client_data(self, kind: str, challenge: str) -> bytes:
        return json.dumps(
            {"type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": False}
        ).encode()

    def _cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        x, y = numbers.x.to_bytes(32, "big"), numbers.y.to_bytes(32, "big")
        # EC2 key (1: 2), ES256 (3: -7), P-256 (-1: 1), x (-2) and y (-3).
        return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: x, -3: y})

    def register(self, options: str) -> str:
        """The ``PublicKeyCredential`` (as JSON) that ``navigator.credentials.create`` would
        give for these options."""
        asked: dict[str, Any] = json.loads(options)
        self.user_handle = base64url_to_bytes(asked["user"]["id"])
        rp_hash = hashlib.sha256(asked["rp"]["id"].encode()).digest()
        length = struct.pack(">H", len(self.credential_id))
        attested = AAGUID + length + self.credential_id + self._cose_key()
        auth_data = rp_hash + bytes([UP | UV | AT]) + struct.pack(">I", self.sign_count) + attested
        client_data = self._client_data("webauthn.create", asked["challenge"])
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return json.dumps(
            {
                "id": self.id,
                "rawId": self.id,
                "type": "public-key",
                "response": {
                    "clientDataJSON": bytes_to_base64url(client_data),
                    "attestationObject": bytes_to_base64url(attestation),
                    "transports": ["internal"],
                },
                "clientExtensionResults": {},
                "authenticatorAttachment": "platform",
            }
        )

    def assertion(self, options: str | dict[str, Any]) -> str:
        """The ``PublicKeyCredential`` (as JSON) that ``navigator.credentials.get`` would
        give for these options: authenticator data and client data signed with the key."""
        asked: dict[str, Any] = json.loads(options) if isinstance(options, str) else options
        self.sign_count += 1
        rp_hash = hashlib.sha256(asked["rpId"].encode()).digest()
        auth_data = rp_hash + bytes([UP | UV]) + struct.pack(">I", self.sign_count)
        client_data = self._client_data("webauthn.get", asked["challenge"])
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return json.dumps(
            {
                "id": self.id,
                "rawId": self.id,
                "type": "public-key",
                "response": {
                    "clientDataJSON": bytes_to_base64url(client_data),
                    "authenticatorData": bytes_to_base64url(auth_data),
                    "signature": bytes_to_base64url(signature),
                    "userHandle": bytes_to_base64url(self.user_handle),
                },
                "clientExtensionResults": {},
                "authenticatorAttachment": "platform",
            }
        )
