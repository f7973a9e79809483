"""The channels, the outbox and the delivery attempts move to the notifications app, which
takes them over in its migration 0001 under the same tables: here they leave approvals' state
only, and no table changes."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0014_notification_call_channel"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="DeliveryAttempt"),
                migrations.DeleteModel(name="Notification"),
                migrations.DeleteModel(name="NotificationChannel"),
            ],
        ),
    ]
