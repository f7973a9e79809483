"""Each ledger's total per UTC hour, kept with its entries, so that a window's total reads
at most an hour of entries (approvals/services/statements.py); filled here from the
entries already recorded."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def hours_from_entries(apps: Any, schema_editor: Any) -> None:
    entry_model = apps.get_model("approvals", "LedgerEntry")
    hour_model = apps.get_model("approvals", "LedgerHour")
    totals: defaultdict[tuple[int, datetime], int] = defaultdict(int)
    entries = entry_model.objects.filter(voided_at__isnull=True)
    for ledger_id, recorded_at, minor in entries.values_list(
        "ledger_id", "recorded_at", "minor"
    ).iterator():
        hour = recorded_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        totals[ledger_id, hour] += minor
    hour_model.objects.bulk_create(
        [
            hour_model(ledger_id=ledger_id, hour=hour, minor=minor)
            for (ledger_id, hour), minor in sorted(totals.items())
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0012_ledger_entry_window_sum"),
    ]

    operations = [
        migrations.CreateModel(
            name="LedgerHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField(help_text="The hour's start, UTC.")),
                ("minor", models.BigIntegerField()),
                (
                    "ledger",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="hours",
                        to="approvals.ledger",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("ledger", "hour"), name="one_ledger_hour"),
                    models.CheckConstraint(
                        condition=models.Q(("minor__gte", 0)), name="ledger_hour_not_negative"
                    ),
                ],
            },
        ),
        migrations.RunPython(hours_from_entries, migrations.RunPython.noop),
    ]
