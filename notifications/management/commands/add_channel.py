"""``manage.py add_channel KIND TARGET``: create a notification channel; its id on the last
line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.channels import ChannelInvalid, channel_add
from notifications.models import NotificationChannel


def _items(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


class Command(BaseCommand):
    help = (
        "Create a notification channel (docs/notifications.md), audited, and print its id "
        "alone on the last line. A webhook without --secret gets a new whsec_ secret, "
        "printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help="email, webhook or apprise.")
        parser.add_argument(
            "target",
            help="email: 'approvers' or comma-separated addresses; webhook: an http(s) URL; "
            "apprise: an Apprise URL.",
        )
        parser.add_argument(
            "--events",
            metavar="E,…",
            help="The events sent (default: all): " + ", ".join(NotificationChannel.Event.values),
        )
        parser.add_argument(
            "--gates", metavar="G,…", help="Only calls held at these gates (default: every gate)."
        )
        parser.add_argument("--secret", help="A webhook's signing secret, whsec_ and base64.")
        parser.add_argument("--name", default="", help="A name to tell channels apart.")

    def handle(self, *args: Any, **options: Any) -> None:
        events = _items(options["events"])
        try:
            channel = channel_add(
                kind=options["kind"],
                target=options["target"],
                events=events if events is not None else None,
                gates=_items(options["gates"]) or [],
                secret=options["secret"],
                name=options["name"],
            )
        except ChannelInvalid as error:
            raise CommandError(str(error), returncode=1) from None
        self.stdout.write(
            f"Channel {channel.pk}: {channel.kind}, events {', '.join(channel.events)}, "
            f"gates {', '.join(channel.gates) or 'all'}."
        )
        if channel.kind == NotificationChannel.Kind.WEBHOOK and options["secret"] is None:
            self.stdout.write("Webhook secret (shown once, store it now):")
            self.stdout.write(channel.secret)
        self.stdout.write(str(channel.pk))
