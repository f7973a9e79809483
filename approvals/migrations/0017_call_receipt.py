"""Where an allowed or approved call's signed receipt is kept (docs/receipts.md)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0016_ledger_reservations"),
    ]

    operations = [
        migrations.AddField(
            model_name="call",
            name="receipt",
            field=models.TextField(blank=True),
        ),
    ]
