"""The Python client of Countersign: submit an agent's tool call, wait for the decision, and
run the tool only when it is allowed or approved (``docs/api.md``); every other outcome is a
``NotApproved``. It speaks only HTTP and WebSockets and imports nothing of the service
(``docs/integrations.md``)."""

from __future__ import annotations

from countersign.client import AsyncClient, Client
from countersign.errors import (
    BadRequest,
    Conflict,
    CountersignError,
    Denied,
    EditDoesNotFit,
    Forbidden,
    NotApproved,
    NotFound,
    RateLimited,
    ServiceUnavailable,
    TimedOut,
    TooLarge,
    Unauthorized,
)

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Conflict",
    "CountersignError",
    "Denied",
    "EditDoesNotFit",
    "Forbidden",
    "NotApproved",
    "NotFound",
    "RateLimited",
    "ServiceUnavailable",
    "TimedOut",
    "TooLarge",
    "Unauthorized",
]
