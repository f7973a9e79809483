"""Held calls reserve their amounts in their ledgers, and an approval counts towards the
gates the call was held at when it was given (docs/rules.md, "Held calls reserve"). The calls
held now reserve here, and their approvals count at the gates they are held at."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.utils import timezone


def held_calls_reserve(apps: Any, schema_editor: Any) -> None:
    call_model = apps.get_model("approvals", "Call")
    ledger_model = apps.get_model("approvals", "Ledger")
    reservation_model = apps.get_model("approvals", "LedgerReservation")
    approval_model = apps.get_model("approvals", "Approval")
    now = timezone.now()
    for call in call_model.objects.filter(status="pending").iterator():
        approval_model.objects.filter(call=call, voided_at__isnull=True).update(gates=call.gates)
        held_for = {
            str(reason["rule"]).casefold()
            for reason in call.reasons
            if reason.get("policy") == "cap" and reason.get("rule")
        }
        for record in call.pending_records:
            ledger, _ = ledger_model.objects.get_or_create(
                rule=record["rule"],
                currency=record["currency"],
                key_digest=record["key_digest"] or "",
            )
            reservation_model.objects.get_or_create(
                ledger=ledger,
                call=call,
                defaults={
                    "minor": record["minor"],
                    "held_for_rule": record["rule"] in held_for,
                    "reserved_at": now,
                },
            )


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0015_notifications_app"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="gates",
            field=models.JSONField(default=list),
        ),
        migrations.CreateModel(
            name="LedgerReservation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("minor", models.BigIntegerField()),
                (
                    "held_for_rule",
                    models.BooleanField(
                        help_text="The call is held at this ledger's rule's own gate for going "
                        "over it: only that gate's approval records it, so other calls' "
                        "re-checks leave it out."
                    ),
                ),
                ("reserved_at", models.DateTimeField()),
                (
                    "call",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="ledger_reservations",
                        to="approvals.call",
                    ),
                ),
                (
                    "ledger",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="reservations",
                        to="approvals.ledger",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("ledger", "call"), name="one_reservation_per_call"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("minor__gte", 0)),
                        name="ledger_reservation_not_negative",
                    ),
                ],
            },
        ),
        migrations.RunPython(held_calls_reserve, migrations.RunPython.noop),
    ]
