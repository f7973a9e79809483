"""The admin's name for ledger entries ("ledger entries", not "ledger entrys"). Options only:
no table changes."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_vocabulary"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="ledgerentry",
            options={"verbose_name_plural": "ledger entries"},
        ),
    ]
