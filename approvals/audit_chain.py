"""The audit chain's arithmetic: an entry as an outsider reads it (the export's item), the
canonical bytes of its content, and its hash (docs/receipts.md, "The audit chain").

    hash = SHA-256( prev_hash ‖ canonical JSON of the item without "prev_hash" and "hash" )

- ``prev_hash`` is the entry before's ``hash`` as 64 lowercase hex characters (ASCII), and
  ``GENESIS_HASH``, 64 zeros, before the first entry; ``‖`` is plain concatenation of bytes.
- The canonical JSON is RFC 8785's (JCS) for these items: keys sorted, no whitespace, UTF-8,
  non-ASCII characters as themselves, only ``"``, ``\\`` and U+0000–U+001F escaped (``\\b``
  ``\\t`` ``\\n`` ``\\f`` ``\\r``, the rest as ``\\u00xx``); the only numbers are integers.
  Python's ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
  writes exactly that.
- Every stored field of an entry is in its item, so no column can change unseen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from approvals.models import AuditEntry

GENESIS_HASH = "0" * 64
NAIVE_TIME = "an audit entry's time is timezone-aware"
# Not part of the hashed content: the link to the entry before, and the hash itself.
LINK_FIELDS = ("prev_hash", "hash")


def audit_time_text(moment: datetime) -> str:
    """An entry's ``at`` as it is hashed and exported: UTC, microseconds, ``Z``
    (``2026-12-07T04:45:00.123456Z``)."""
    if moment.tzinfo is None:
        raise ValueError(NAIVE_TIME)
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def audit_content(entry: AuditEntry) -> dict[str, Any]:
    """What the entry's hash covers: every stored field but its id and its links."""
    return {
        "seq": entry.seq,
        "at": audit_time_text(entry.at),
        "actor": {
            "user_id": entry.user_id,
            "username": entry.username,
            "agent_id": entry.agent_id,
        },
        "action": entry.action,
        "call": entry.object_id if entry.object_type == AuditEntry.ObjectType.CALL else None,
        "details": {
            "object_type": entry.object_type,
            "object_id": entry.object_id,
            "before": entry.before,
            "after": entry.after,
        },
    }


def audit_canonical(content: Mapping[str, Any]) -> bytes:
    """The canonical JSON of an item's content (RFC 8785 for these items)."""
    text = json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def audit_link_hash(prev_hash: str, content: Mapping[str, Any]) -> str:
    """The hash of an entry with this content linked after ``prev_hash``."""
    return hashlib.sha256(prev_hash.encode("ascii") + audit_canonical(content)).hexdigest()


def audit_entry_hash(entry: AuditEntry) -> str:
    """The hash ``entry`` should have, from its content and its ``prev_hash``."""
    return audit_link_hash(entry.prev_hash, audit_content(entry))


def audit_item(entry: AuditEntry) -> dict[str, Any]:
    """The entry as exported: its content, ``prev_hash`` and ``hash``."""
    return {**audit_content(entry), "prev_hash": entry.prev_hash, "hash": entry.hash}
