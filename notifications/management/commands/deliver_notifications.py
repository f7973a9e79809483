"""``manage.py deliver_notifications``: the notifications' delivery loop on its own, until
SIGTERM or SIGINT; ``--once`` sends what is due now and ends; ``--prune`` deletes the old
delivered and failed messages and ends."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from notifications.attempts import notifications_prune
from notifications.delivery import deliver_once, ensure_delivery_started
from notifications.outbox import calls_expiring_notify


class Command(BaseCommand):
    help = (
        "Deliver the outbox's notifications (every server process does too; any number may "
        "run at once) until SIGTERM or SIGINT. --once: write the expiring notices due and "
        "send every message due now, then end. --prune: delete the delivered and failed "
        "messages older than COUNTERSIGN_NOTIFY_KEEP_DAYS, then end."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        ending = parser.add_mutually_exclusive_group()
        ending.add_argument("--once", action="store_true", help="Send what is due now, then end.")
        ending.add_argument(
            "--prune",
            action="store_true",
            help="Delete the delivered and failed messages (and their attempts) written more "
            "than COUNTERSIGN_NOTIFY_KEEP_DAYS days ago, then end. The loop does so hourly.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["prune"]:
            self.stdout.write(f"{notifications_prune()} pruned")
            return
        if options["once"]:
            calls_expiring_notify()
            self.stdout.write(f"{deliver_once()} attempted")
            return
        asyncio.run(self._run())

    async def _run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        deliverer = ensure_delivery_started()
        self.stdout.write("delivering notifications", ending="\n")
        self.stdout.flush()
        await stop.wait()
        # The runs under way end after their current attempt (each within its deadline)
        # and keep their attempts; what was not sent stays in the outbox.
        await deliverer.drain()
