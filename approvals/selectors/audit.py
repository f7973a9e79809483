"""The audit log read as a chain (docs/receipts.md, "The audit chain"): its head, its pages
for a SIEM, and the walk that checks every link.

Every read here is bounded: a page is at most ``AUDIT_PAGE_MOST`` entries, and the walk reads
``batch`` entries at a time, however long the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Subquery

from approvals.audit_chain import GENESIS_HASH, audit_entry_hash, audit_item
from approvals.models import AUDIT_CHAIN_HEAD, AuditChainHead, AuditEntry

AUDIT_PAGE_MOST = 1000
VERIFY_BATCH = 1000

# What the walk finds wrong, first thing first; never any of the entry's own text.
MISSING = "seq {seq} is missing: the log goes from seq {before} to seq {after}"
OUT_OF_SEQUENCE = "seq {seq} (id {id}) is out of sequence: seq {expected} was expected"
BROKEN_LINK = "seq {seq} (id {id}): its prev_hash is not the hash of {before}"
WRONG_HASH = "seq {seq} (id {id}): its hash does not match its content"
CUT_SHORT = "seq {seq} is missing: the log ends at seq {last}, its head is at seq {head}"
NOT_THE_HEAD = "seq {seq} (id {id}): its hash is not the one the chain's head holds"
PAST_THE_HEAD = "seq {seq}: written past the chain's head at seq {head}"
NO_HEAD = "the chain's head row is missing while the log has entries"


@dataclass(frozen=True, slots=True)
class ChainIntact:
    """Every entry up to ``seq`` is in place, linked and unchanged; ``hash`` is the last's."""

    entries: int
    seq: int
    hash: str


@dataclass(frozen=True, slots=True)
class ChainBroken:
    """The first entry found wrong (``seq``; None when no one entry is to blame), and how."""

    seq: int | None
    problem: str


def audit_head() -> tuple[int, str]:
    """The latest entry's ``seq`` and ``hash``; ``(0, GENESIS_HASH)`` for an empty log."""
    latest = AuditEntry.objects.order_by("-seq").values_list("seq", "hash").first()
    return latest or (0, GENESIS_HASH)


def audit_hash_at(*, seq: int) -> str | None:
    """The hash of the entry ``seq`` (the genesis for 0); None when there is none."""
    if seq == 0:
        return GENESIS_HASH
    return AuditEntry.objects.filter(seq=seq).values_list("hash", flat=True).first()


def audit_page(*, after: int, limit: int) -> list[dict[str, Any]]:
    """The entries with ``seq`` greater than ``after``, oldest first, at most ``limit``
    (1 to ``AUDIT_PAGE_MOST``), as exported."""
    if not 1 <= limit <= AUDIT_PAGE_MOST:
        raise ValueError(limit)
    return [
        audit_item(entry)
        for entry in AuditEntry.objects.filter(seq__gt=after).order_by("seq")[:limit]
    ]


def audit_items(*, after: int, batch: int = AUDIT_PAGE_MOST) -> Iterator[dict[str, Any]]:
    """Every entry after ``after`` up to the latest when it is called, oldest first, read
    ``batch`` at a time: entries written meanwhile are left to the next export."""
    last, _ = audit_head()
    while after < last:
        page = audit_page(after=after, limit=batch)
        page = [item for item in page if item["seq"] <= last]
        if not page:
            return
        yield from page
        after = page[-1]["seq"]


def _head_and_past() -> tuple[int, str, int | None] | None:
    """The head row's ``seq`` and ``hash``, and the first entry's ``seq`` past it, read in one
    statement (so at one moment); None without a head row."""
    past = AuditEntry.objects.filter(seq__gt=OuterRef("seq")).order_by("seq").values("seq")[:1]
    row = (
        AuditChainHead.objects.filter(pk=AUDIT_CHAIN_HEAD)
        .annotate(past=Subquery(past))
        .values_list("seq", "hash", "past")
        .first()
    )
    return None if row is None else (row[0], row[1], row[2])


def _walk(head: int, batch: int) -> tuple[int, str, int | None] | ChainBroken:
    """Every entry up to ``head`` in ``seq`` order, checked against the one before: the last
    one's ``seq``, ``hash`` and id, or the first break."""
    seq, prev_hash, last_id = 0, GENESIS_HASH, None
    while True:
        entries = AuditEntry.objects.filter(seq__lte=head).order_by("seq")
        # The first batch has no lower bound: an entry numbered 0 or less is out of place too.
        if last_id is not None:
            entries = entries.filter(seq__gt=seq)
        chunk = list(entries[:batch])
        if not chunk:
            return seq, prev_hash, last_id
        for entry in chunk:
            expected = seq + 1
            if entry.seq < expected:
                return ChainBroken(
                    entry.seq,
                    OUT_OF_SEQUENCE.format(seq=entry.seq, id=entry.pk, expected=expected),
                )
            if entry.seq > expected:
                return ChainBroken(
                    expected, MISSING.format(seq=expected, before=seq, after=entry.seq)
                )
            if entry.prev_hash != prev_hash:
                before = "the genesis" if seq == 0 else f"seq {seq}"
                return ChainBroken(
                    entry.seq, BROKEN_LINK.format(seq=entry.seq, id=entry.pk, before=before)
                )
            if audit_entry_hash(entry) != entry.hash:
                return ChainBroken(entry.seq, WRONG_HASH.format(seq=entry.seq, id=entry.pk))
            seq, prev_hash, last_id = entry.seq, entry.hash, entry.pk


def audit_chain_verify(*, batch: int = VERIFY_BATCH) -> ChainIntact | ChainBroken:
    """Walk the chain from its first entry to its head, ``batch`` entries at a time: intact,
    or the first entry whose sequence, link or hash is wrong. Entries written while it walks
    are past the head it read first, and not walked."""
    found = _head_and_past()
    if found is None:
        first = AuditEntry.objects.order_by("seq").values_list("seq", flat=True).first()
        return ChainIntact(0, 0, GENESIS_HASH) if first is None else ChainBroken(None, NO_HEAD)
    head_seq, head_hash, past = found
    walked = _walk(head_seq, batch)
    if isinstance(walked, ChainBroken):
        return walked
    seq, hash_, last_id = walked
    if seq < head_seq:
        return ChainBroken(seq + 1, CUT_SHORT.format(seq=seq + 1, last=seq, head=head_seq))
    if hash_ != head_hash:
        return ChainBroken(seq, NOT_THE_HEAD.format(seq=seq, id=last_id))
    if past is not None:
        return ChainBroken(past, PAST_THE_HEAD.format(seq=past, head=head_seq))
    return ChainIntact(seq, seq, hash_)


def audit_entry_intact(*, entry: AuditEntry) -> bool:
    """Whether ``entry`` is as it was written: its hash matches its content, and the entry
    after it (the chain's head, for the latest) links to that hash. A rewrite of every entry
    from there on and of the head too is for ``audit_verify --head`` to catch."""
    if audit_entry_hash(entry) != entry.hash:
        return False
    # The head first: once it has moved past the entry, the entry after it is committed.
    head = AuditChainHead.objects.filter(pk=AUDIT_CHAIN_HEAD).values_list("seq", "hash").first()
    if head is not None and head[0] == entry.seq:
        return head[1] == entry.hash
    following = (
        AuditEntry.objects.filter(seq=entry.seq + 1).values_list("prev_hash", flat=True).first()
    )
    return following == entry.hash


# A person's decision on a call, as its audit entry names it; made with a passkey, the entry
# keeps ``{"comment": …, "passkey": …}`` (services/decisions.py).
DECISION_ACTIONS = (
    AuditEntry.Action.CALL_APPROVED,
    AuditEntry.Action.CALL_PENDING,
    AuditEntry.Action.CALL_DENIED,
)


@dataclass(frozen=True, slots=True)
class KeptPasskey:
    """A decision entry's comment and the assertion it keeps (empty when not an object)."""

    comment: str
    evidence: dict[str, object]


def decision_passkey_kept(*, entry: AuditEntry) -> KeptPasskey | None:
    """What a decision entry made with a passkey keeps; None for any other entry."""
    if entry.action not in DECISION_ACTIONS or entry.object_type != AuditEntry.ObjectType.CALL:
        return None
    try:
        kept = json.loads(entry.after)
    except ValueError:
        return None
    if not isinstance(kept, dict) or "passkey" not in kept:
        return None
    evidence = kept["passkey"]
    return KeptPasskey(
        comment=str(kept.get("comment", "")),
        evidence=evidence if isinstance(evidence, dict) else {},
    )
