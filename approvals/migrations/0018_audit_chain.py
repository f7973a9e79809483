"""Every audit entry gets its place in one hash chain: ``seq`` (1, 2, 3… with no gaps),
``prev_hash`` and ``hash``, and the chain's head gets a one-row table (approvals/audit_chain.py,
docs/receipts.md "The audit chain").

The entries already there are chained in the order they were written: by time, then id. The
guard of ``0009_audit_guard`` refuses every UPDATE of an entry, so it is dropped for the
backfill and created again at the end, after the columns' constraints (SQLite rebuilds the
table for them, which would drop its triggers anyway). The reverse drops the guard, removes
the columns and the head, and creates the guard again.

The canonical form is written out here, not imported, so that this migration stays what it
was when the code around it changes; the tests check that it chains as the code does.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from datetime import UTC
from typing import Any

from django.db import migrations, models
from django.db.models import Q

GUARD = importlib.import_module("approvals.migrations.0009_audit_guard")
GENESIS_HASH = "0" * 64
HEAD = 1
BATCH = 1000


def _guard_drop(apps: Any, schema_editor: Any) -> None:
    GUARD.guard_drop(schema_editor.connection)


def _guard_create(apps: Any, schema_editor: Any) -> None:
    GUARD.guard_create(schema_editor.connection)


def _content(entry: Any) -> dict[str, Any]:
    at = entry.at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return {
        "seq": entry.seq,
        "at": at,
        "actor": {
            "user_id": entry.user_id,
            "username": entry.username,
            "agent_id": entry.agent_id,
        },
        "action": entry.action,
        "call": entry.object_id if entry.object_type == "call" else None,
        "details": {
            "object_type": entry.object_type,
            "object_id": entry.object_id,
            "before": entry.before,
            "after": entry.after,
        },
    }


def _hash(prev_hash: str, entry: Any) -> str:
    canonical = json.dumps(
        _content(entry), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    return hashlib.sha256(prev_hash.encode("ascii") + canonical).hexdigest()


def _chain_existing(apps: Any, schema_editor: Any) -> None:
    entries = apps.get_model("approvals", "AuditEntry")
    alias = schema_editor.connection.alias
    # The historical model has the plain manager: its updates are allowed, here.
    ordered = entries.objects.using(alias).order_by("at", "id")
    seq, prev_hash, last = 0, GENESIS_HASH, None
    while True:
        batch = ordered
        if last is not None:
            at, pk = last
            batch = ordered.filter(Q(at__gt=at) | Q(at=at, id__gt=pk))
        chunk = list(batch[:BATCH])
        if not chunk:
            break
        for entry in chunk:
            seq += 1
            entry.seq, entry.prev_hash = seq, prev_hash
            entry.hash = prev_hash = _hash(prev_hash, entry)
        entries.objects.using(alias).bulk_update(chunk, ["seq", "prev_hash", "hash"])
        last = (chunk[-1].at, chunk[-1].pk)
    if schema_editor.connection.vendor == "postgresql":
        # No trigger event may still be pending on the table when its columns are altered.
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    apps.get_model("approvals", "AuditChainHead").objects.using(alias).create(
        pk=HEAD, seq=seq, hash=prev_hash
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0017_call_receipt"),
    ]

    operations = [
        migrations.RunPython(_guard_drop, _guard_create),
        migrations.AddField(
            model_name="auditentry",
            name="seq",
            field=models.BigIntegerField(null=True),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="prev_hash",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="hash",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.CreateModel(
            name="AuditChainHead",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.BigIntegerField()),
                ("hash", models.CharField(max_length=64)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(condition=Q(id=1), name="one_audit_chain_head")
                ],
            },
        ),
        migrations.RunPython(_chain_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="auditentry",
            name="seq",
            field=models.BigIntegerField(unique=True),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="prev_hash",
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="hash",
            field=models.CharField(max_length=64),
        ),
        migrations.RunPython(_guard_create, _guard_drop),
    ]
