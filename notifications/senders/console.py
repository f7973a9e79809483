"""Mail printed instead of sent, short enough to read in ``make run``'s terminal: the backend
when no mail server is configured under DEBUG. One block per mail text: who it is to, the
subject and the plain-text part (the HTML alternative is left out)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

HEADING = "Mail, printed here (no mail server is set: EMAIL_URL) to {to}: {subject}"
INDENT = "    "


class EmailBackend(BaseEmailBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.stream = kwargs.pop("stream", sys.stdout)
        kwargs.pop("timeout", None)
        self._lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        # Mails of one text to several people (each approver gets their own) print once.
        blocks: dict[tuple[str, str], list[str]] = {}
        for message in email_messages:
            to = blocks.setdefault((str(message.subject), str(message.body)), [])
            to.extend(message.recipients())
        with self._lock:
            for (subject, body), to in blocks.items():
                lines = [HEADING.format(to=", ".join(to), subject=subject)]
                lines.extend(INDENT + line if line else "" for line in body.strip().splitlines())
                self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        return len(email_messages)
