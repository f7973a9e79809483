"""One index fewer written with every message: the call's own foreign-key index goes, and
the index of a claim's order check leads with the call instead of the channel, so that it
serves a call's messages too. The foreign-key index is dropped by name (the one migration
0011 gave it on every database) rather than by altering the field, which SQLite would do by
copying the whole table."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

CALL_INDEX = "approvals_notification_call_id_2c5d6fa8"


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0013_ledger_hours"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="notification", name="notification_channel_call"),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                fields=["call", "channel", "created_at"], name="notification_call_channel"
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="notification",
                    name="call",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="notifications",
                        to="approvals.call",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX "{CALL_INDEX}"',
                    reverse_sql=f'CREATE INDEX "{CALL_INDEX}" ON "approvals_notification" '
                    '("call_id")',
                ),
            ],
        ),
    ]
