"""Voiding a ledger entry: the amount stops counting, with a reason, audited, once."""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.models import AuditEntry, Ledger, LedgerEntry, LedgerHour
from approvals.selectors.ledgers import ledger_spent
from approvals.services.ledgers import (
    ALREADY_VOIDED,
    HOUR_HAS_NO_TOTAL,
    VOID_NEEDS_REASON,
    VoidRefused,
    ledger_entry_void,
)
from tests.factories import agent_make, call_make, payment, rule_make, user_make


@pytest.fixture
def entry(db: None) -> LedgerEntry:
    rule_make(line="daily: pay arg=amount sum USD 1000.00 -> gate")
    call = call_make(agent=agent_make(), arguments=payment("250.00"))
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
    admin_user = user_make(username="root", superuser=True)
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


def _hour_lost(entry: LedgerEntry) -> None:
    """The ledger's hourly totals out of step with its entries: the entry's hour has none."""
    LedgerHour.objects.filter(ledger_id=entry.ledger_id).delete()


def test_a_void_whose_hour_has_no_total_is_refused_and_changes_nothing(
    entry: LedgerEntry,
) -> None:
    _hour_lost(entry)
    with pytest.raises(VoidRefused, match=HOUR_HAS_NO_TOTAL):
        ledger_entry_void(entry_id=entry.pk, reason="card declined", by_user=None)
    kept = LedgerEntry.objects.get(pk=entry.pk)
    assert kept.voided_at is None
    assert kept.void_reason == ""
    assert not AuditEntry.objects.filter(action="ledger entry voided").exists()


def test_admin_shows_a_refused_void_as_an_error_on_the_entry_not_a_server_error(
    entry: LedgerEntry,
) -> None:
    _hour_lost(entry)
    client = Client()
    client.force_login(user_make(username="root", superuser=True))
    url = f"/admin/approvals/ledgerentry/{entry.pk}/change/"
    answer = client.post(url, {"void_reason": "payment failed"}, follow=True)
    assert answer.redirect_chain == [(url, 302)]
    shown = [str(message) for message in answer.context["messages"]]
    assert shown == [HOUR_HAS_NO_TOTAL]
    assert LedgerEntry.objects.get(pk=entry.pk).voided_at is None
    assert not AuditEntry.objects.filter(action="ledger entry voided").exists()
