"""``manage.py passkey_verify``: a decision's assertion kept in its audit entry verifies again
with py_webauthn against the decider's public key; one made for another call, digest or
verb, a tampered signature, an altered entry or a removed passkey does not, and the command
says why and exits non-zero (docs/identity.md, "Re-verifying a decision").

The assertions are genuine: a software authenticator (tests/identity/authenticator.py)
registers a passkey and signs the step-up's challenge, through the services the browser's
ceremonies reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from approvals.models import Agent, AuditEntry, Call, Gate
from approvals.services.decisions import call_decide
from identity.passkeys import (
    passkey_register,
    passkey_registration_begin,
    passkey_remove,
    stepup_begin,
    stepup_verify,
)
from identity.selectors import (
    CREDENTIAL_REMOVED,
    ENTRY_ALTERED,
    NOT_BOUND,
    NOT_THEIRS,
    OTHER_ORIGIN,
    SIGNATURE_BAD,
)
from tests.factories import call_make, payment, rule_make, user_make
from tests.identity.authenticator import SoftAuthenticator
from tests.live import ROOT, _database_url
from tests.tamper import TABLE, rewrite_rechained, tamper

PUBLIC_URL = "https://countersign.example.test"


@pytest.fixture(autouse=True)
def _public_url(settings: Any) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = PUBLIC_URL


class Approver:
    """alice with a passkey in a software authenticator, deciding at the treasury gate."""

    def __init__(self) -> None:
        self.user: User = user_make(username="alice")
        self.authenticator = SoftAuthenticator(PUBLIC_URL)
        nonce, options = passkey_registration_begin(user=self.user)
        passkey_register(
            user=self.user,
            nonce=nonce,
            credential=self.authenticator.register(options),
            name="Laptop",
        )
        rule_make(line="huge: pay arg=amount max USD 10000 -> gate treasury")
        Gate.objects.filter(name="treasury").update(require_passkey=True)
        self.agent = Agent.objects.create(name="bot", principal="carol", allowed_principals="*")

    def held(self) -> Call:
        call = call_make(agent=self.agent, arguments=payment("25000.00"))
        assert "treasury" in call.gates
        return call

    def decide(
        self, call: Call, *, approve: bool = True, arguments: str | None = None
    ) -> AuditEntry:
        """The decision made with a passkey touch, as the call page's buttons make it (an
        approval may edit the arguments first)."""
        answer = json.loads(
            stepup_begin(
                user=self.user,
                call_id=call.pk,
                arguments_sha256=call.arguments_sha256,
                approve=approve,
            )
        )
        verified = stepup_verify(
            user=self.user,
            call_id=call.pk,
            arguments_sha256=call.arguments_sha256,
            approve=approve,
            nonce=answer["nonce"],
            credential=self.authenticator.assertion(answer["options"]),
        )
        call_decide(
            call_id=call.pk,
            user=self.user,
            approve=approve,
            comment="checked with finance",
            arguments_sha256=call.arguments_sha256,
            arguments=arguments,
            passkey=verified,
        )
        action = "call approved" if approve else "call denied"
        return AuditEntry.objects.get(action=action, object_id=str(call.pk))


@pytest.fixture
def alice(db: None) -> Approver:
    return Approver()


def _run(*options: str) -> str:
    out = StringIO()
    call_command("passkey_verify", *options, stdout=out)
    return out.getvalue()


def _failed(*options: str) -> tuple[str, str]:
    """What a failing run wrote, and its error."""
    out = StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("passkey_verify", *options, stdout=out)
    return out.getvalue(), str(refused.value)


def _evidence(entry: AuditEntry) -> dict[str, Any]:
    kept: dict[str, Any] = json.loads(entry.after)
    return kept


def _with_evidence(entry: AuditEntry, **changes: str | None) -> str:
    """The entry's ``after`` with its passkey evidence changed (None drops a field)."""
    kept = _evidence(entry)
    for name, value in changes.items():
        if value is None:
            kept["passkey"].pop(name)
        else:
            kept["passkey"][name] = value
    return json.dumps(kept, sort_keys=True)


def test_a_decision_s_assertion_verifies_again(alice: Approver) -> None:
    call = alice.held()
    entry = alice.decide(call)
    kept = _evidence(entry)
    assert kept["comment"] == "checked with finance"
    assert kept["passkey"]["arguments_sha256"] == call.arguments_sha256
    line = f"seq {entry.seq} call approved {call.pk} by alice: verified"
    assert _run() == f"{line}\n1 passkey assertion verified\n"
    assert _run("--call", str(call.pk)) == f"{line}\n1 passkey assertion verified\n"
    assert _run("--entry", str(entry.seq)) == f"{line}\n1 passkey assertion verified\n"


def test_a_denial_verifies_as_a_denial(alice: Approver) -> None:
    entry = alice.decide(alice.held(), approve=False)
    assert _run("--entry", str(entry.seq)).endswith("1 passkey assertion verified\n")
    # Claimed as an approval, the assertion made for "deny" is not bound to it.
    rewrite_rechained(entry.seq, action="call approved")
    out, error = _failed()
    assert f"NOT VERIFIED: {NOT_BOUND}" in out
    assert error == "1 of 1 passkey assertions do not verify"


def _swap_call(entry: AuditEntry, other: Call) -> dict[str, Any]:
    return {"object_id": str(other.pk)}


def _other_digest(entry: AuditEntry, other: Call) -> dict[str, Any]:
    return {"after": _with_evidence(entry, arguments_sha256="0" * 64)}


def _bad_signature(entry: AuditEntry, other: Call) -> dict[str, Any]:
    signature = bytearray(base64url_to_bytes(_evidence(entry)["passkey"]["signature"]))
    signature[-1] ^= 0x01
    return {"after": _with_evidence(entry, signature=bytes_to_base64url(bytes(signature)))}


def _other_nonce(entry: AuditEntry, other: Call) -> dict[str, Any]:
    return {"after": _with_evidence(entry, nonce="A" * 43)}


def _other_decider(entry: AuditEntry, other: Call) -> dict[str, Any]:
    bob = user_make(username="bob")
    return {"user_id": bob.pk, "username": "bob"}


@pytest.mark.parametrize(
    ("rewrite", "problem"),
    [
        (_swap_call, NOT_BOUND),
        (_other_digest, NOT_BOUND),
        (_other_nonce, NOT_BOUND),
        (_bad_signature, SIGNATURE_BAD),
        (_other_decider, NOT_THEIRS),
    ],
    ids=["swapped call id", "other digest", "other nonce", "tampered signature", "other decider"],
)
def test_an_entry_rewritten_and_rechained_fails_and_says_why(
    alice: Approver, rewrite: Any, problem: str
) -> None:
    """An intruder who rewrites the entry and re-links the chain after it passes the chain's
    own check; the assertion gives it away."""
    call, other = alice.held(), alice.held()
    entry = alice.decide(call)
    kept = alice.decide(other)
    rewrite_rechained(entry.seq, **rewrite(entry, other))
    rewritten = AuditEntry.objects.get(pk=entry.pk)
    out, error = _failed()
    assert out.splitlines() == [
        f"seq {entry.seq} call approved {rewritten.object_id} by {rewritten.username}: "
        f"NOT VERIFIED: {problem}",
        f"seq {kept.seq} call approved {other.pk} by alice: verified",
    ]
    assert error == "1 of 2 passkey assertions do not verify"


def test_an_entry_changed_without_rechaining_is_named_altered(alice: Approver) -> None:
    entry = alice.decide(alice.held())
    tamper(
        f'UPDATE {TABLE} SET "after" = %s WHERE "seq" = %s',
        [_with_evidence(entry, arguments_sha256="0" * 64), entry.seq],
    )
    out, error = _failed("--entry", str(entry.seq))
    assert out.endswith(f"NOT VERIFIED: {ENTRY_ALTERED}\n")
    assert error == "1 of 1 passkey assertions do not verify"


def test_a_removed_passkey_cannot_verify_its_decisions(alice: Approver) -> None:
    alice.decide(alice.held())
    passkey_remove(user=alice.user, passkey_id=alice.user.passkeys.get().pk)
    out, _ = _failed()
    assert out.endswith(f"NOT VERIFIED: {CREDENTIAL_REMOVED}\n")


def test_another_relying_party_origin_is_named(alice: Approver, settings: Any) -> None:
    alice.decide(alice.held())
    settings.COUNTERSIGN_PUBLIC_URL = "https://elsewhere.example.test"
    out, _ = _failed()
    assert out.endswith(f"NOT VERIFIED: {OTHER_ORIGIN}\n")


def test_an_entry_kept_before_the_digest_was_reads_it_from_the_call(alice: Approver) -> None:
    """Entries written before the evidence kept ``arguments_sha256`` are never rewritten: the
    digest then comes from the call (here an entry so shaped, chained as written)."""
    call = alice.held()
    entry = alice.decide(call)
    rewrite_rechained(entry.seq, after=_with_evidence(entry, arguments_sha256=None))
    assert _run().endswith("1 passkey assertion verified\n")
    # Edited since by someone else: the call keeps its original digest.
    Call.objects.filter(pk=call.pk).update(
        original_arguments_sha256=call.arguments_sha256, arguments_sha256="0" * 64
    )
    assert _run().endswith("1 passkey assertion verified\n")
    Call.objects.filter(pk=call.pk).update(original_arguments_sha256="1" * 64)
    out, _ = _failed()
    assert out.endswith(f"NOT VERIFIED: {NOT_BOUND}\n")


def test_an_edit_then_approval_is_bound_to_the_digest_shown_before_the_edit(
    alice: Approver,
) -> None:
    call = alice.held()
    shown = call.arguments_sha256
    entry = alice.decide(call, arguments=payment("24000.00"))
    assert Call.objects.get(pk=call.pk).arguments_sha256 != shown
    edited = AuditEntry.objects.get(action="call edited", object_id=str(call.pk))
    assert edited.seq < entry.seq
    assert _evidence(entry)["passkey"]["arguments_sha256"] == shown
    assert _run().endswith("1 passkey assertion verified\n")
    # Shaped as an entry from before the digest was kept: the edit's entry gives it.
    rewrite_rechained(entry.seq, after=_with_evidence(entry, arguments_sha256=None))
    assert _run().endswith("1 passkey assertion verified\n")


def test_what_is_not_a_passkey_decision_is_refused_by_name(alice: Approver) -> None:
    call = alice.held()
    assert _failed("--entry", "1")[1] == "seq 1 is no decision made with a passkey"
    assert _failed("--entry", "99999")[1] == "seq 99999 is no decision made with a passkey"
    assert _failed("--call", str(call.pk))[1] == (
        f"no decision of call {call.pk} was made with a passkey"
    )
    assert _failed("--call", "not-a-uuid")[1] == "--call is a call id (a UUID)"
    assert _run() == "0 passkey assertions verified\n"


def test_a_comment_dressed_as_evidence_does_not_verify(alice: Approver) -> None:
    """A decision at a gate without a passkey keeps its comment as written: one that looks
    like kept evidence claims a passkey, and fails."""
    Gate.objects.filter(name="treasury").update(require_passkey=False)
    call = alice.held()
    forged = json.dumps({"comment": "", "passkey": {"credential_id": "x"}})
    call_decide(
        call_id=call.pk,
        user=alice.user,
        approve=True,
        comment=forged,
        arguments_sha256=call.arguments_sha256,
    )
    out, _ = _failed()
    assert out.endswith("NOT VERIFIED: its passkey assertion is incomplete or unreadable\n")


@pytest.mark.django_db(transaction=True)
def test_the_command_s_exit_codes_in_a_process_of_its_own() -> None:
    alice = Approver()
    entry = alice.decide(alice.held())
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "COUNTERSIGN_PUBLIC_URL": PUBLIC_URL,
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "passkey_verify", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    verified = manage()
    assert (verified.returncode, verified.stdout.splitlines()[-1]) == (
        0,
        "1 passkey assertion verified",
    ), verified.stderr
    rewrite_rechained(entry.seq, after=_with_evidence(entry, arguments_sha256="0" * 64))
    failed = manage("--entry", str(entry.seq))
    assert failed.returncode == 1
    assert failed.stdout.strip().endswith(f"NOT VERIFIED: {NOT_BOUND}")
    assert failed.stderr.strip() == "CommandError: 1 of 1 passkey assertions do not verify"
