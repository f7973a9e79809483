"""Passkeys' writes: registration, sign-in with a discoverable credential, and the step-up
assertion a decision at a passkey gate needs (docs/identity.md, "Passkeys" and "Step-up at
a gate").

Every ceremony starts with a server nonce (``PasskeyChallenge``), used once and only for
``CHALLENGE_SECONDS``: the use deletes the row, whether the assertion then verifies or not.
A step-up's challenge is no random value but derived from the decision: the SHA-256 of the
call id, its ``arguments_sha256``, the verb and the nonce (``stepup_challenge``), so the
signed assertion names exactly one decision and can be checked again from the audit entry.
All WebAuthn parsing and checking is py_webauthn's.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticationCredential,
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from approvals.errors import NotFound, NotPermitted
from approvals.models import AuditEntry
from approvals.services.audit import audit_record
from approvals.stepup import VerifiedPasskey
from identity.models import Passkey, PasskeyChallenge

# How long a ceremony's nonce may be used, and what the browser is told to wait.
CHALLENGE_SECONDS = 120
RP_NAME = "Countersign"
NAME_MAX = 64
DEFAULT_NAME = "Passkey"
VERBS = {True: "approve", False: "deny"}
# What a refusal says: never anything the browser sent.
NO_RELYING_PARTY = (
    "Passkeys need COUNTERSIGN_PUBLIC_URL to name a host (localhost in development), not an "
    "IP address."
)
CHALLENGE_UNUSABLE = "The passkey challenge is unknown, used already or expired. Try again."
ASSERTION_NOT_VALID = "The passkey assertion is not valid for this request."
PASSKEY_UNKNOWN = "This passkey is not registered here."
NO_PASSKEY = "You have no passkey: add one on your account page (/account/)."
NO_SUCH_PASSKEY = "no such passkey"

Purpose = PasskeyChallenge.Purpose


class PasskeyRefused(NotPermitted):
    """A ceremony that cannot complete; the message says why, in fixed words."""


@dataclass(frozen=True, slots=True)
class RelyingParty:
    """WebAuthn's relying party: the host of ``COUNTERSIGN_PUBLIC_URL`` and its origin."""

    id: str
    origin: str


def relying_party() -> RelyingParty | None:
    """None when ``COUNTERSIGN_PUBLIC_URL`` names an IP address, which cannot be an RP id."""
    parts = urlsplit(settings.COUNTERSIGN_PUBLIC_URL)
    host = parts.hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host:
            return RelyingParty(id=host, origin=f"{parts.scheme}://{parts.netloc}")
    return None


def _party() -> RelyingParty:
    party = relying_party()
    if party is None:
        raise PasskeyRefused(NO_RELYING_PARTY)
    return party


def _nonce_new(
    *,
    purpose: str,
    now: datetime,
    user: User | None = None,
    call_id: uuid.UUID | None = None,
    arguments_sha256: str = "",
    verb: str = "",
) -> str:
    """A fresh nonce stored for one use; expired ones are dropped on the way."""
    PasskeyChallenge.objects.filter(expires_at__lte=now).delete()
    nonce = bytes_to_base64url(secrets.token_bytes(32))
    PasskeyChallenge.objects.create(
        nonce=nonce,
        purpose=purpose,
        user=user,
        call_id=call_id,
        arguments_sha256=arguments_sha256,
        verb=verb,
        expires_at=now + timedelta(seconds=CHALLENGE_SECONDS),
    )
    return nonce


def _nonce_use(*, nonce: str, purpose: str, now: datetime, **bound: object) -> None:
    """Delete the nonce if it is unexpired and made for exactly this (``bound``): one
    statement, so that two uses at once cannot both succeed."""
    used, _ = PasskeyChallenge.objects.filter(
        nonce=nonce, purpose=purpose, expires_at__gt=now, **bound
    ).delete()
    if not used:
        raise PasskeyRefused(CHALLENGE_UNUSABLE)


def stepup_challenge(
    *, call_id: uuid.UUID, arguments_sha256: str, approve: bool, nonce: str
) -> bytes:
    """The challenge of a decision's assertion: what it binds, hashed together."""
    text = "\n".join(
        ["countersign step-up v1", str(call_id), arguments_sha256, VERBS[approve], nonce]
    )
    return hashlib.sha256(text.encode()).digest()


def _user_handle(user: User) -> bytes:
    return str(user.pk).encode()


def _descriptors(user: User) -> list[PublicKeyCredentialDescriptor]:
    ids = Passkey.objects.filter(user=user).values_list("credential_id", flat=True)
    return [PublicKeyCredentialDescriptor(id=base64url_to_bytes(i)) for i in ids]


# --- Registration --------------------------------------------------------------------------


def passkey_registration_begin(*, user: User, now: datetime | None = None) -> tuple[str, str]:
    """The nonce (for the session) and the options for ``navigator.credentials.create``:
    user verification required, a resident key preferred, none of their passkeys again."""
    party, now = _party(), now or timezone.now()
    nonce = _nonce_new(purpose=Purpose.REGISTER, user=user, now=now)
    options = generate_registration_options(
        rp_id=party.id,
        rp_name=RP_NAME,
        user_name=user.get_username(),
        user_id=_user_handle(user),
        challenge=base64url_to_bytes(nonce),
        timeout=CHALLENGE_SECONDS * 1000,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=_descriptors(user),
    )
    return nonce, options_to_json(options)


@transaction.atomic
def passkey_register(
    *, user: User, nonce: str, credential: str, name: str, now: datetime | None = None
) -> Passkey:
    """The passkey the browser made for ``nonce``'s options, stored and audited."""
    party, now = _party(), now or timezone.now()
    _nonce_use(nonce=nonce, purpose=Purpose.REGISTER, now=now, user=user)
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=base64url_to_bytes(nonce),
            expected_rp_id=party.id,
            expected_origin=party.origin,
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError):
        raise PasskeyRefused(ASSERTION_NOT_VALID) from None
    credential_id = bytes_to_base64url(verified.credential_id)
    if Passkey.objects.filter(credential_id=credential_id).exists():
        raise PasskeyRefused(ASSERTION_NOT_VALID)
    passkey = Passkey.objects.create(
        user=user,
        name=name.strip()[:NAME_MAX] or DEFAULT_NAME,
        credential_id=credential_id,
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        created=now,
    )
    audit_record(
        action=AuditEntry.Action.PASSKEY_ADDED,
        object_type=AuditEntry.ObjectType.USER,
        object_id=user.pk,
        user=user,
        after=json.dumps({"passkey": passkey.name, "credential_id": credential_id}),
        at=now,
    )
    return passkey


@transaction.atomic
def passkey_remove(*, user: User, passkey_id: int, now: datetime | None = None) -> None:
    """Remove one of ``user``'s passkeys, audited; another's or none: ``NotFound``."""
    passkey = Passkey.objects.select_for_update().filter(pk=passkey_id, user=user).first()
    if passkey is None:
        raise NotFound(NO_SUCH_PASSKEY)
    before = json.dumps({"passkey": passkey.name, "credential_id": passkey.credential_id})
    passkey.delete()
    audit_record(
        action=AuditEntry.Action.PASSKEY_REMOVED,
        object_type=AuditEntry.ObjectType.USER,
        object_id=user.pk,
        user=user,
        before=before,
        at=now or timezone.now(),
    )


# --- Assertions: sign-in and step-up --------------------------------------------------------


def _parsed(credential: str) -> AuthenticationCredential:
    try:
        return parse_authentication_credential_json(credential)
    except (WebAuthnException, ValueError, KeyError, TypeError):
        raise PasskeyRefused(ASSERTION_NOT_VALID) from None


def _assertion_check(
    *, parsed: AuthenticationCredential, passkey: Passkey, challenge: bytes, now: datetime
) -> None:
    """py_webauthn's verification (user verification required, the counter moving on),
    then the counter stored: only if no other use moved it meanwhile."""
    party = _party()
    try:
        verified = verify_authentication_response(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=party.id,
            expected_origin=party.origin,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError):
        raise PasskeyRefused(ASSERTION_NOT_VALID) from None
    moved = Passkey.objects.filter(pk=passkey.pk, sign_count=passkey.sign_count).update(
        sign_count=verified.new_sign_count, last_used=now
    )
    if not moved:
        raise PasskeyRefused(ASSERTION_NOT_VALID)


def passkey_sign_in_begin(*, now: datetime | None = None) -> tuple[str, str]:
    """The nonce (for the session) and the options for ``navigator.credentials.get``: any
    discoverable credential, user verification required."""
    party, now = _party(), now or timezone.now()
    nonce = _nonce_new(purpose=Purpose.SIGN_IN, now=now)
    options = generate_authentication_options(
        rp_id=party.id,
        challenge=base64url_to_bytes(nonce),
        timeout=CHALLENGE_SECONDS * 1000,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return nonce, options_to_json(options)


def passkey_sign_in(*, nonce: str, credential: str, now: datetime | None = None) -> User:
    """The active person whose registered passkey made this assertion for ``nonce``; an
    unknown or removed credential, or a deactivated person, signs nobody in."""
    now = now or timezone.now()
    _nonce_use(nonce=nonce, purpose=Purpose.SIGN_IN, now=now)
    parsed = _parsed(credential)
    passkey = (
        Passkey.objects.select_related("user")
        .filter(credential_id=bytes_to_base64url(parsed.raw_id), user__is_active=True)
        .first()
    )
    if passkey is None:
        raise PasskeyRefused(PASSKEY_UNKNOWN)
    handle = parsed.response.user_handle
    if handle is not None and handle != _user_handle(passkey.user):
        raise PasskeyRefused(ASSERTION_NOT_VALID)
    _assertion_check(parsed=parsed, passkey=passkey, challenge=base64url_to_bytes(nonce), now=now)
    return passkey.user


def stepup_begin(
    *,
    user: User,
    call_id: uuid.UUID,
    arguments_sha256: str,
    approve: bool,
    now: datetime | None = None,
) -> str:
    """The options for the assertion of one decision: ``user``'s passkeys, user
    verification required, the challenge derived from the decision and a fresh nonce."""
    party, now = _party(), now or timezone.now()
    allowed = _descriptors(user)
    if not allowed:
        raise PasskeyRefused(NO_PASSKEY)
    nonce = _nonce_new(
        purpose=Purpose.STEP_UP,
        user=user,
        call_id=call_id,
        arguments_sha256=arguments_sha256,
        verb=VERBS[approve],
        now=now,
    )
    challenge = stepup_challenge(
        call_id=call_id, arguments_sha256=arguments_sha256, approve=approve, nonce=nonce
    )
    options = generate_authentication_options(
        rp_id=party.id,
        challenge=challenge,
        timeout=CHALLENGE_SECONDS * 1000,
        allow_credentials=allowed,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    # The nonce goes with the options: the browser posts it back with the assertion.
    return json.dumps({"nonce": nonce, "options": json.loads(options_to_json(options))})


def stepup_verify(
    *,
    user: User,
    call_id: uuid.UUID,
    arguments_sha256: str,
    approve: bool,
    nonce: str,
    credential: str,
    now: datetime | None = None,
) -> VerifiedPasskey:
    """The assertion of one decision, verified: its nonce unexpired, unused and made for
    this person, call, digest and verb, and signed by one of their passkeys over the
    challenge derived from them. Anything else: ``PasskeyRefused``."""
    now = now or timezone.now()
    _nonce_use(
        nonce=nonce,
        purpose=Purpose.STEP_UP,
        now=now,
        user=user,
        call_id=call_id,
        arguments_sha256=arguments_sha256,
        verb=VERBS[approve],
    )
    parsed = _parsed(credential)
    credential_id = bytes_to_base64url(parsed.raw_id)
    passkey = Passkey.objects.filter(credential_id=credential_id, user=user).first()
    if passkey is None:
        raise PasskeyRefused(PASSKEY_UNKNOWN)
    challenge = stepup_challenge(
        call_id=call_id, arguments_sha256=arguments_sha256, approve=approve, nonce=nonce
    )
    _assertion_check(parsed=parsed, passkey=passkey, challenge=challenge, now=now)
    return VerifiedPasskey(
        user_id=user.pk,
        call_id=call_id,
        arguments_sha256=arguments_sha256,
        approve=approve,
        credential_id=credential_id,
        nonce=nonce,
        authenticator_data=bytes_to_base64url(parsed.response.authenticator_data),
        client_data_json=bytes_to_base64url(parsed.response.client_data_json),
        signature=bytes_to_base64url(parsed.response.signature),
    )
