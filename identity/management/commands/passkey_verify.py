"""``manage.py passkey_verify [--call ID | --entry SEQ]``: verify again the passkey
assertions kept in decisions' audit entries (docs/identity.md, "Re-verifying a decision").

Each is checked with py_webauthn against the decider's stored public key, over the challenge
derived from the entry's call, the digest and the verb, for this server's relying party. One
line per entry, ``verified`` or why not; exits 0 when every one verifies, otherwise 1.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.errors import ApplicationError
from identity.selectors import AssertionCheck, passkey_decisions_verify

VERIFIED = "verified"
NOT_VERIFIED = "NOT VERIFIED: {problem}"
LINE = "seq {seq} {action} {call} by {username}: {verdict}"
ALL_VERIFIED = "{count} passkey assertion{s} verified"
SOME_FAILED = "{failed} of {count} passkey assertions do not verify"
NONE_OF_THE_CALL = "no decision of call {call} was made with a passkey"
NOT_A_CALL_ID = "--call is a call id (a UUID)"


def _line(check: AssertionCheck) -> str:
    verdict = VERIFIED if check.problem is None else NOT_VERIFIED.format(problem=check.problem)
    return LINE.format(
        seq=check.seq,
        action=check.action,
        call=check.call_id,
        username=check.username or "nobody",
        verdict=verdict,
    )


class Command(BaseCommand):
    help = (
        "Verify again the passkey assertions kept in decisions' audit entries: all, one "
        "call's, or one entry's. Exits 1 when any does not verify."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--call", metavar="ID", help="the decisions of this call only")
        which.add_argument(
            "--entry", type=int, metavar="SEQ", help="this audit entry only (its seq)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_id = None
        if options["call"] is not None:
            try:
                call_id = uuid.UUID(options["call"])
            except ValueError:
                raise CommandError(NOT_A_CALL_ID) from None
        count = failed = 0
        try:
            for check in passkey_decisions_verify(call_id=call_id, seq=options["entry"]):
                count += 1
                failed += not check.verified
                self.stdout.write(_line(check))
        except ApplicationError as refused:
            raise CommandError(refused.message) from None
        if call_id is not None and count == 0:
            raise CommandError(NONE_OF_THE_CALL.format(call=call_id))
        if failed:
            raise CommandError(SOME_FAILED.format(failed=failed, count=count))
        self.stdout.write(ALL_VERIFIED.format(count=count, s="" if count == 1 else "s"))
