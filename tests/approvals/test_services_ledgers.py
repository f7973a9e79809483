"""Voiding a ledger entry: the amount stops counting, with a reason, audited, once."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals.models import Agent, AuditEntry, Ledger, LedgerEntry
from approvals.selectors import ledger_spent
from approvals.services.calls import Submission, call_submit
from approvals.services.ledgers import (
    ALREADY_VOIDED,
    VOID_NEEDS_REASON,
    VoidRefused,
    ledger_entry_void,
)
from approvals.services.rules import cap_rule_save


@pytest.fixture
def entry(db: None) -> LedgerEntry:
    cap_rule_save(line="daily: pay arg=amount sum USD 1000.00 -> gate")
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    call, _ = call_submit(
        agent=agent,
        submission=Submission(tool="pay", arguments='{"amount": "250.00"}', principal="carol"),
    )
    assert call.status == "allowed"
    return LedgerEntry.objects.get(call=call)


def test_a_voided_entry_stops_counting(entry: LedgerEntry) -> None:
    ledger = Ledger.objects.get()
    assert ledger_spent(ledger=ledger, window=None, now=entry.recorded_at) == 25000
    ledger_entry_void(entry_id=entry.pk, reason="card declined", by_user=None)
    assert ledger_spent(ledger=ledger, window=None, now=entry.recorded_at) == 0
    audit = AuditEntry.objects.get(action="ledger entry voided")
    assert audit.after == "void: card declined"


def test_void_needs_a_reason_and_happens_once(entry: LedgerEntry) -> None:
    with pytest.raises(VoidRefused, match=VOID_NEEDS_REASON):
        ledger_entry_void(entry_id=entry.pk, reason="  ", by_user=None)
    ledger_entry_void(entry_id=entry.pk, reason="refunded", by_user=None)
    with pytest.raises(VoidRefused, match=ALREADY_VOIDED):
        ledger_entry_void(entry_id=entry.pk, reason="again", by_user=None)


def test_admin_voids_with_a_required_reason(entry: LedgerEntry) -> None:
    admin_user = User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(admin_user)
    url = f"/admin/approvals/ledgerentry/{entry.pk}/change/"
    assert client.post(url, {"void_reason": ""}).status_code == 200  # the form comes back
    assert LedgerEntry.objects.get(pk=entry.pk).voided_at is None
    assert client.post(url, {"void_reason": "payment failed"}).status_code == 302
    voided = LedgerEntry.objects.get(pk=entry.pk)
    assert voided.void_reason == "payment failed"
    assert AuditEntry.objects.get(action="ledger entry voided").user == admin_user
    assert client.post(url, {"void_reason": "twice"}).status_code == 403
