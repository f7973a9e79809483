"""What a login page offers (the password form, single sign-on, passkeys), a person's
passkeys, whose passkey a sign-in names (for the login throttle), and the assertions kept in
decisions' audit entries, verified again (``passkey_decisions_verify``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from webauthn import verify_authentication_response
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
    parse_client_data_json,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import AuthenticationCredential, AuthenticatorAssertionResponse

from approvals.errors import NotFound
from approvals.models import AuditEntry, Call
from approvals.selectors.audit import DECISION_ACTIONS, audit_entry_intact, decision_passkey_kept
from identity.discovery import sso_ready
from identity.models import Passkey
from identity.passkeys import (
    NO_RELYING_PARTY,
    PasskeyRefused,
    RelyingParty,
    relying_party,
    stepup_challenge,
)


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


def passkey_claimed_username(*, credential: str) -> str | None:
    """The username of whoever registered the passkey an assertion (not yet verified) names:
    what a sign-in's failures are counted under, as a password login's are under the name
    typed. None for an unreadable assertion or a passkey not registered here."""
    try:
        parsed = parse_authentication_credential_json(credential)
    except (WebAuthnException, ValueError, KeyError, TypeError):
        return None
    owner: str | None = (
        Passkey.objects.filter(credential_id=bytes_to_base64url(parsed.raw_id))
        .values_list("user__username", flat=True)
        .first()
    )
    return owner


# --- Decisions' assertions, verified again (docs/identity.md, "Re-verifying a decision") -----

EVIDENCE_FIELDS = ("credential_id", "nonce", "authenticator_data", "client_data_json", "signature")
# Why an assertion does not verify again; fixed words, never any of the entry's text.
ENTRY_ALTERED = "the entry was altered: its hash does not match its content or the next link"
EVIDENCE_UNREADABLE = "its passkey assertion is incomplete or unreadable"
DIGEST_UNKNOWN = "the digest it was made for cannot be read from the call's history"
NOT_BOUND = "the assertion was not made for this call, its digest and this verb"
CREDENTIAL_REMOVED = "the passkey was removed: its public key is no longer stored"
NOT_THEIRS = "the passkey is registered to another person than the decider"
OTHER_ORIGIN = "the assertion was made for another origin than COUNTERSIGN_PUBLIC_URL's"
SIGNATURE_BAD = "the signature does not verify with the passkey's public key"
NO_SUCH_DECISION = "seq {seq} is no decision made with a passkey"


@dataclass(frozen=True, slots=True)
class AssertionCheck:
    """One decision's kept assertion, verified again: ``problem`` is None when it verifies."""

    seq: int
    call_id: str
    action: str
    username: str
    problem: str | None

    @property
    def verified(self) -> bool:
        return self.problem is None


def _evidence(entry: AuditEntry) -> dict[str, object] | None:
    kept = decision_passkey_kept(entry=entry)
    return None if kept is None else kept.evidence


def _digest_from_history(entry: AuditEntry, call_id: uuid.UUID) -> str | None:
    """The digest the call had when an entry that does not keep it was written: the latest
    edit before it says (its earlier digest when the edit was this very decision's, which was
    bound to the call as shown), else the call's original digest."""
    edit = (
        AuditEntry.objects.filter(
            object_type=AuditEntry.ObjectType.CALL,
            object_id=entry.object_id,
            action=AuditEntry.Action.CALL_EDITED,
            seq__lt=entry.seq,
        )
        .order_by("-seq")
        .first()
    )
    if edit is None:
        digests = (
            Call.objects.filter(pk=call_id)
            .values_list("original_arguments_sha256", "arguments_sha256")
            .first()
        )
        return None if digests is None else digests[0] or digests[1]
    own = edit.user_id == entry.user_id and edit.at == entry.at
    try:
        side = json.loads(edit.before if own else edit.after)
    except ValueError:
        return None
    digest = side.get("arguments_sha256") if isinstance(side, dict) else None
    return digest if isinstance(digest, str) else None


def _problem(entry: AuditEntry, evidence: dict[str, object], party: RelyingParty) -> str | None:
    """Why ``entry``'s assertion does not verify again, first thing first; None when it does.
    The verification is py_webauthn's; the checks before it only name what failed."""
    if not audit_entry_intact(entry=entry):
        return ENTRY_ALTERED
    fields = {name: evidence.get(name) for name in EVIDENCE_FIELDS}
    if not all(isinstance(value, str) and value for value in fields.values()):
        return EVIDENCE_UNREADABLE
    try:
        call_id = uuid.UUID(entry.object_id)
    except ValueError:
        return EVIDENCE_UNREADABLE
    kept_digest = evidence.get("arguments_sha256")
    digest = _digest_from_history(entry, call_id) if kept_digest is None else kept_digest
    if not isinstance(digest, str):
        return DIGEST_UNKNOWN if kept_digest is None else EVIDENCE_UNREADABLE
    try:
        credential = AuthenticationCredential(
            id=str(fields["credential_id"]),
            raw_id=base64url_to_bytes(str(fields["credential_id"])),
            response=AuthenticatorAssertionResponse(
                client_data_json=base64url_to_bytes(str(fields["client_data_json"])),
                authenticator_data=base64url_to_bytes(str(fields["authenticator_data"])),
                signature=base64url_to_bytes(str(fields["signature"])),
            ),
        )
        client_data = parse_client_data_json(credential.response.client_data_json)
    except (WebAuthnException, ValueError, TypeError):
        return EVIDENCE_UNREADABLE
    challenge = stepup_challenge(
        call_id=call_id,
        arguments_sha256=digest,
        approve=entry.action != AuditEntry.Action.CALL_DENIED,
        nonce=str(fields["nonce"]),
    )
    if client_data.challenge != challenge:
        return NOT_BOUND
    passkey = Passkey.objects.filter(credential_id=credential.id).first()
    if passkey is None:
        return CREDENTIAL_REMOVED
    if passkey.user_id != entry.user_id:
        return NOT_THEIRS
    if client_data.origin != party.origin:
        return OTHER_ORIGIN
    try:
        verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=party.id,
            expected_origin=party.origin,
            credential_public_key=bytes(passkey.public_key),
            # The counter has moved on since: this checks the signature, not its freshness,
            # which the decision checked when it was made.
            credential_current_sign_count=0,
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError):
        return SIGNATURE_BAD
    return None


def _checked(entry: AuditEntry, evidence: dict[str, object], party: RelyingParty) -> AssertionCheck:
    return AssertionCheck(
        seq=entry.seq,
        call_id=entry.object_id,
        action=entry.action,
        username=entry.username,
        problem=_problem(entry, evidence, party),
    )


def passkey_decisions_verify(
    *, call_id: uuid.UUID | None = None, seq: int | None = None
) -> Iterator[AssertionCheck]:
    """Every decision entry that keeps a passkey assertion (of the call ``call_id``, or the
    one entry ``seq``: ``NotFound`` unless it is such a decision), oldest first, its
    assertion verified again with py_webauthn against the decider's passkey, over the
    challenge derived from the entry's call, the digest and the verb. Passkeys unusable here
    (``COUNTERSIGN_PUBLIC_URL`` names no host): ``PasskeyRefused``."""
    party = relying_party()
    if party is None:
        raise PasskeyRefused(NO_RELYING_PARTY)
    if seq is not None:
        entry = AuditEntry.objects.filter(seq=seq).first()
        evidence = None if entry is None else _evidence(entry)
        if entry is None or evidence is None:
            raise NotFound(NO_SUCH_DECISION.format(seq=seq))
        yield _checked(entry, evidence, party)
        return
    entries = AuditEntry.objects.filter(
        object_type=AuditEntry.ObjectType.CALL,
        action__in=DECISION_ACTIONS,
        # A first sieve in the database; the entry's JSON is read for the rest.
        after__contains='"passkey"',
    )
    if call_id is not None:
        entries = entries.filter(object_id=str(call_id))
    for entry in entries.order_by("seq").iterator(chunk_size=500):
        evidence = _evidence(entry)
        if evidence is not None:
            yield _checked(entry, evidence, party)
