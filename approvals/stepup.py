"""A decision's passkey step-up, as the decision service sees it: an assertion checked
already (identity/passkeys.py) and made for one call, its digest and one verb. The service
never speaks WebAuthn; it refuses a decision at a passkey gate without one of these."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VerifiedPasskey:
    """What the person's authenticator signed, kept in the decision's audit entry so that it
    can be verified again against their public key: the credential, the digest and the
    server nonce the challenge was derived from (the call and the verb are the entry's own),
    and the assertion's parts (base64url). Entries written before the digest was kept lack
    it: ``manage.py passkey_verify`` reads it from the call's history then."""

    user_id: int
    call_id: uuid.UUID
    arguments_sha256: str
    approve: bool
    credential_id: str
    nonce: str
    authenticator_data: str
    client_data_json: str
    signature: str

    def evidence(self) -> dict[str, str]:
        return {
            "credential_id": self.credential_id,
            "arguments_sha256": self.arguments_sha256,
            "nonce": self.nonce,
            "authenticator_data": self.authenticator_data,
            "client_data_json": self.client_data_json,
            "signature": self.signature,
        }
