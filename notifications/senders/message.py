"""What a sender reads of a message."""

from __future__ import annotations

import uuid
from typing import Protocol


class Message(Protocol):
    """What a sender reads of a message (a ``Notification`` has it all)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def call_id(self) -> uuid.UUID: ...
    @property
    def event(self) -> str: ...
    @property
    def payload(self) -> str: ...
