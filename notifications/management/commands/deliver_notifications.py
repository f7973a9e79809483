"""``manage.py deliver_notifications``: the notifications' delivery loop on its own, until
SIGTERM or SIGINT; ``--once`` sends what is due now and ends."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from notifications.delivery import deliver_once, ensure_delivery_started
from notifications.outbox import calls_expiring_notify


class Command(BaseCommand):
    help = (
        "Deliver the outbox's notifications (every server process does too; any number may "
        "run at once) until SIGTERM or SIGINT. --once: write the expiring notices due and "
        "send every message due now, then end."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Send what is due now, then end.")

    def handle(self, *args: Any, **options: Any) -> None:
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
        # The sends under way end (each within its timeout) and keep their attempts.
        await deliverer.drain()
