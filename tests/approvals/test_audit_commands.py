"""``manage.py audit_verify`` and ``manage.py audit_export`` as an operator runs them: real
processes on the suite's database (SQLite or PostgreSQL) and on a fresh SQLite file, their exit
codes and output; and ``--head``, which holds the log to heads a monitor stored, so that a log
cut short or rewritten whole, head row and all, still fails (docs/receipts.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from approvals.audit_chain import GENESIS_HASH, audit_content, audit_link_hash
from approvals.models import AuditEntry
from approvals.receipts.keys import AUDIT_HEAD_TYPE, sign_jws
from approvals.services.audit import audit_record
from tests.live import ROOT, _database_url
from tests.tamper import HEAD_TABLE, TABLE, tamper

AUDIT_TOKEN = "audit-token-for-the-monitor-0123456789"


def _record(n: int) -> AuditEntry:
    return audit_record(
        action=AuditEntry.Action.CALL_EXPIRED,
        object_type=AuditEntry.ObjectType.CALL,
        object_id=n,
        after=f"entry {n}",
    )


def _verify(*options: str) -> str:
    out = StringIO()
    call_command("audit_verify", *options, stdout=out)
    return out.getvalue()


def _broken(*options: str) -> str:
    with pytest.raises(CommandError) as refused:
        _verify(*options)
    return str(refused.value)


def _stored_head(settings: Any) -> str:
    """A head as a monitor fetches and stores it."""
    settings.COUNTERSIGN_AUDIT_TOKEN = AUDIT_TOKEN
    response = Client().get("/api/v1/audit/head", HTTP_AUTHORIZATION=f"Bearer {AUDIT_TOKEN}")
    assert response.status_code == 200
    head: str = response.json()["head"]
    return head


# --- --head ---------------------------------------------------------------------------------


def test_a_log_grown_since_a_stored_head_still_holds_it(db: None, settings: Any) -> None:
    for n in range(1, 5):
        _record(n)
    early = _stored_head(settings)
    for n in range(5, 8):
        _record(n)
    line = _verify("--head", early, "--head", _stored_head(settings))
    assert line.endswith(", holding the 2 signed heads given\n")


def test_a_log_cut_short_with_its_head_row_is_caught_by_a_stored_head(
    db: None, settings: Any
) -> None:
    entries = [_record(n) for n in range(1, 8)]
    stored = _stored_head(settings)
    # Entries 6 and 7 gone, and the head row moved back to 5: the chain alone is whole.
    tamper(f'DELETE FROM {TABLE} WHERE "seq" >= 6')
    tamper(f'UPDATE {HEAD_TABLE} SET "seq" = 5, "hash" = %s', [entries[4].hash])
    assert _verify().startswith("audit chain intact: 5 entries")
    assert _broken("--head", stored) == (
        "audit chain broken: signed head 1 is at seq 7, past the log's end at seq 5: cut short"
    )


def test_a_log_rewritten_whole_is_caught_by_a_stored_head(db: None, settings: Any) -> None:
    for n in range(1, 6):
        _record(n)
    stored = _stored_head(settings)
    # Entry 3 changed, and every hash from there on computed again, the head row too.
    tamper(f'UPDATE {TABLE} SET "after" = %s WHERE "seq" = 3', ["rewritten"])
    previous = AuditEntry.objects.get(seq=2).hash
    for entry in AuditEntry.objects.filter(seq__gte=3).order_by("seq"):
        entry.prev_hash = previous
        previous = audit_link_hash(previous, audit_content(entry))
        tamper(
            f'UPDATE {TABLE} SET "prev_hash" = %s, "hash" = %s WHERE "seq" = %s',
            [entry.prev_hash, previous, entry.seq],
        )
    tamper(f'UPDATE {HEAD_TABLE} SET "hash" = %s', [previous])
    assert _verify().startswith("audit chain intact: 5 entries")
    assert _broken("--head", stored) == (
        "audit chain broken: seq 5: its hash is not the one signed head 1 holds: rewritten"
    )


@pytest.mark.parametrize(
    "head",
    [
        "not.a.jws",
        "",
        "eyJhbGciOiJub25lIn0.eyJzZXEiOjAsImhhc2giOiIwIn0.",  # alg none
    ],
)
def test_a_head_this_server_did_not_sign_is_refused(db: None, head: str) -> None:
    assert _broken("--head", head) == (
        "audit chain broken: signed head 1: not an audit head signed with this server's keys"
    )


def test_a_receipt_is_not_a_head(db: None) -> None:
    receipt = sign_jws({"seq": 0, "hash": GENESIS_HASH}, typ="countersign-receipt+jwt")
    assert "not an audit head" in _broken("--head", receipt)
    genuine = sign_jws({"seq": 0, "hash": GENESIS_HASH, "iat": 0}, typ=AUDIT_HEAD_TYPE)
    assert _verify("--head", genuine).startswith("audit chain intact: 0 entries")


# --- real processes ---------------------------------------------------------------------------


def _manage(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_a_direct_update_on_the_suites_database_fails_the_command() -> None:
    """On PostgreSQL with ``session_replication_role = replica``, on SQLite with the triggers
    dropped: the command, in a process of its own, exits 1 naming the entry."""
    entries = [_record(n) for n in range(1, 6)]
    url = _database_url()
    intact = _manage(url, "audit_verify")
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout == f"audit chain intact: 5 entries, head seq 5 hash {entries[-1].hash}\n"

    tamper(f'UPDATE {TABLE} SET "username" = %s WHERE "seq" = 2', ["nobody"])
    broken = _manage(url, "audit_verify")
    assert broken.returncode == 1
    assert broken.stdout == ""
    assert broken.stderr.strip() == (
        f"CommandError: audit chain broken: seq 2 (id {entries[1].pk}): its hash does not match "
        "its content"
    )


def test_on_a_fresh_sqlite_file_end_to_end(tmp_path: Path) -> None:
    """Migrate, write entries as the service does, verify, export; drop the triggers and
    change, delete or insert a row with the sqlite3 shell's rights: each is named."""
    database = tmp_path / "audit.sqlite3"
    url = f"sqlite:///{database}"
    assert _manage(url, "migrate", "-v0").returncode == 0
    for name in ("billing-bot", "ops-bot"):  # an agent created and a token issued, each
        created = _manage(url, "create_agent", name)
        assert created.returncode == 0, created.stderr
    verified = _manage(url, "audit_verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("audit chain intact: 4 entries, head seq 4 hash ")

    exported = _manage(url, "audit_export", "--after", "1")
    assert exported.returncode == 0, exported.stderr
    items = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [item["seq"] for item in items] == [2, 3, 4]
    assert [item["action"] for item in items] == ["token issued", "agent created", "token issued"]
    assert items[1]["prev_hash"] == items[0]["hash"]
    assert _manage(url, "audit_export", "--after", "4").stdout == ""
    assert _manage(url, "audit_export", "--after", "-1").returncode != 0

    def shell(*statements: str) -> None:
        with sqlite3.connect(database) as db:
            for statement in statements:
                db.execute(statement)

    drop = (
        "DROP TRIGGER approvals_auditentry_no_update",
        "DROP TRIGGER approvals_auditentry_no_delete",
    )
    shell(*drop, "UPDATE approvals_auditentry SET after = 'x' WHERE seq = 3")
    broken = _manage(url, "audit_verify")
    assert broken.returncode == 1
    assert "audit chain broken: seq 3 (id " in broken.stderr
    assert "its hash does not match its content" in broken.stderr

    shell("DELETE FROM approvals_auditentry WHERE seq = 2")
    broken = _manage(url, "audit_verify")
    assert broken.returncode == 1
    assert "audit chain broken: seq 2 is missing: the log goes from seq 1 to seq 3" in (
        broken.stderr
    )

    shell(
        "INSERT INTO approvals_auditentry (at, username, action, object_type, object_id,"
        " before, after, seq, prev_hash, hash) SELECT at, username, action, object_type,"
        " object_id, before, after, 2, prev_hash, hash FROM approvals_auditentry WHERE seq = 1"
    )
    broken = _manage(url, "audit_verify")
    assert broken.returncode == 1
    assert "audit chain broken: seq 2 (id " in broken.stderr
    assert "its prev_hash is not the hash of seq 1" in broken.stderr
