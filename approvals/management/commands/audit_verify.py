"""``manage.py audit_verify``: walk the audit chain from its first entry to its head and say
whether every entry is in place, linked and unchanged (docs/receipts.md, "The audit chain").

Exits 0 with one line when the chain is intact; otherwise 1, naming the first entry whose
sequence, link or hash is wrong. With ``--head`` (a signed head a monitor stored, as
``GET /api/v1/audit/head`` gave it; repeatable), the chain must also still hold that head's
entry with that hash: a log cut short or rewritten from there on, head row and all, fails.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.receipts.keys import AUDIT_HEAD_TYPE, NotSigned, verify_jws
from approvals.selectors.audit import (
    VERIFY_BATCH,
    ChainBroken,
    ChainIntact,
    audit_chain_verify,
    audit_hash_at,
)

INTACT = "audit chain intact: {entries} entries, head seq {seq} hash {hash}{heads}"
HEADS_HELD = ", holding the {count} signed head{s} given"
BROKEN = "audit chain broken: {problem}"
NOT_A_HEAD = "signed head {n}: not an audit head signed with this server's keys"
UNREADABLE_HEAD = "signed head {n}: its seq and hash are not readable"
CUT_SHORT = "signed head {n} is at seq {seq}, past the log's end at seq {last}: cut short"
REWRITTEN = "seq {seq}: its hash is not the one signed head {n} holds: rewritten"


def _held(head: str, n: int, intact: ChainIntact) -> str | None:
    """Why the log does not hold signed head ``n``; None when it does."""
    try:
        claims = verify_jws(head.strip(), AUDIT_HEAD_TYPE)
    except NotSigned:
        return NOT_A_HEAD.format(n=n)
    seq, hash_ = claims.get("seq"), claims.get("hash")
    if type(seq) is not int or seq < 0 or type(hash_) is not str:
        return UNREADABLE_HEAD.format(n=n)
    if seq > intact.seq:
        return CUT_SHORT.format(n=n, seq=seq, last=intact.seq)
    if audit_hash_at(seq=seq) != hash_:
        return REWRITTEN.format(seq=seq, n=n)
    return None


class Command(BaseCommand):
    help = "Check every audit entry's sequence, link and hash, up to the chain's head."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch",
            type=int,
            default=VERIFY_BATCH,
            help=f"entries read at a time (default {VERIFY_BATCH})",
        )
        parser.add_argument(
            "--head",
            action="append",
            default=[],
            metavar="JWS",
            help="a signed audit head stored earlier, which the log must still hold (repeatable)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch, heads = options["batch"], options["head"]
        if batch < 1:
            raise CommandError("--batch is at least 1")
        verdict = audit_chain_verify(batch=batch)
        if isinstance(verdict, ChainBroken):
            raise CommandError(BROKEN.format(problem=verdict.problem))
        for n, head in enumerate(heads, start=1):
            problem = _held(head, n, verdict)
            if problem is not None:
                raise CommandError(BROKEN.format(problem=problem))
        held = HEADS_HELD.format(count=len(heads), s="" if len(heads) == 1 else "s")
        self.stdout.write(
            INTACT.format(
                entries=verdict.entries,
                seq=verdict.seq,
                hash=verdict.hash,
                heads=held if heads else "",
            )
        )
