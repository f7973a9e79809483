"""The chain's arithmetic as an outsider redoes it: the canonical form is RFC 8785's (checked
with an independent implementation), and an exported item's hash is recomputed from the item
alone with ``hashlib`` and that implementation (docs/receipts.md, "The audit chain")."""

from __future__ import annotations

import hashlib
import importlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.audit_chain import (
    GENESIS_HASH,
    NAIVE_TIME,
    audit_canonical,
    audit_content,
    audit_entry_hash,
    audit_item,
    audit_time_text,
)
from approvals.models import AuditEntry

MIGRATION = importlib.import_module("approvals.migrations.0018_audit_chain")
# Every character a stored text can hold (no lone surrogates: neither database keeps them).
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
IDS = st.none() | st.integers(min_value=1, max_value=2**53 - 1)


def _entry(**fields: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "seq": 7,
        "at": datetime(2026, 12, 7, 4, 45, 0, 123456, tzinfo=UTC),
        "user_id": 3,
        "username": "alice",
        "agent_id": None,
        "action": "call approved",
        "object_type": "call",
        "object_id": "0b5e5d5c-1b7c-4c8e-9f39-2f6a0d1c6e11",
        "before": "",
        "after": "ok",
        "prev_hash": "ab" * 32,
        **fields,
    }
    return AuditEntry(**values)


def _outsider_hash(item: dict[str, Any]) -> str:
    """What a verifier with only the exported item computes."""
    content = {k: v for k, v in item.items() if k not in ("prev_hash", "hash")}
    return hashlib.sha256(item["prev_hash"].encode() + rfc8785.dumps(content)).hexdigest()


@settings(max_examples=300, deadline=None)
@given(
    username=TEXT,
    object_id=TEXT,
    before=TEXT,
    after=TEXT,
    user_id=IDS,
    agent_id=IDS,
    seq=st.integers(min_value=1, max_value=2**53 - 1),
)
def test_the_canonical_form_is_rfc_8785(
    username: str,
    object_id: str,
    before: str,
    after: str,
    user_id: int | None,
    agent_id: int | None,
    seq: int,
) -> None:
    entry = _entry(
        seq=seq,
        username=username,
        object_id=object_id,
        before=before,
        after=after,
        user_id=user_id,
        agent_id=agent_id,
    )
    content = audit_content(entry)
    assert audit_canonical(content) == rfc8785.dumps(content)
    entry.hash = audit_entry_hash(entry)
    item = json.loads(json.dumps(audit_item(entry)))  # as it travels
    assert _outsider_hash(item) == entry.hash


def test_the_item_holds_every_stored_field_but_the_id() -> None:
    entry = _entry(hash="cd" * 32)
    stored = {f.attname for f in AuditEntry._meta.concrete_fields} - {"id"}
    item = audit_item(entry)
    named = {"seq", "at", "action", "prev_hash", "hash"}
    named |= set(item["actor"]) | set(item["details"])
    assert stored == named


def test_every_field_changes_the_hash() -> None:
    entry = _entry()
    original = audit_entry_hash(entry)
    changes: dict[str, Any] = {
        "seq": 8,
        "at": entry.at + timedelta(microseconds=1),
        "user_id": 4,
        "username": "alicf",
        "agent_id": 1,
        "action": "call denied",
        "object_type": "agent",
        "object_id": entry.object_id + " ",
        "before": " ",
        "after": "ok ",
        "prev_hash": "ac" * 32,
    }
    for name, value in changes.items():
        assert audit_entry_hash(_entry(**{name: value})) != original, name


def test_the_call_is_named_only_for_a_call() -> None:
    assert audit_content(_entry())["call"] == "0b5e5d5c-1b7c-4c8e-9f39-2f6a0d1c6e11"
    assert audit_content(_entry(object_type="agent", object_id="5"))["call"] is None


def test_times_are_utc_with_microseconds_and_a_z() -> None:
    paris = timezone(timedelta(hours=1))
    assert audit_time_text(datetime(2026, 1, 2, 4, 5, 6, tzinfo=paris)) == (
        "2026-01-02T03:05:06.000000Z"
    )
    assert audit_time_text(datetime(999, 1, 1, tzinfo=UTC)) == "0999-01-01T00:00:00.000000Z"
    with pytest.raises(ValueError, match=NAIVE_TIME):
        audit_time_text(datetime(2026, 1, 1))


def test_the_first_link_is_the_genesis_and_a_known_vector_holds() -> None:
    """A fixed entry's hash, worked out by hand from the documented form: a change to the
    canonical form shows here first."""
    entry = _entry(seq=1, prev_hash=GENESIS_HASH)
    expected_text = (
        '{"action":"call approved","actor":{"agent_id":null,"user_id":3,"username":"alice"},'
        '"at":"2026-12-07T04:45:00.123456Z","call":"0b5e5d5c-1b7c-4c8e-9f39-2f6a0d1c6e11",'
        '"details":{"after":"ok","before":"","object_id":"0b5e5d5c-1b7c-4c8e-9f39-2f6a0d1c6e11",'
        '"object_type":"call"},"seq":1}'
    )
    assert audit_canonical(audit_content(entry)) == expected_text.encode()
    expected = hashlib.sha256((GENESIS_HASH + expected_text).encode()).hexdigest()
    assert audit_entry_hash(entry) == expected


def test_the_migration_chains_as_the_code_does() -> None:
    """0018 keeps a copy of the canonical form, so that it stays what it was: the same."""
    for entry in (_entry(), _entry(object_type="user", after="é\n\x00\u2028", agent_id=9)):
        assert MIGRATION._hash(entry.prev_hash, entry) == audit_entry_hash(entry)
