"""The Python client of Countersign: submit an agent's tool call, wait for the decision, and
run the tool only when it is allowed or approved (``docs/api.md``); every other outcome is a
``NotApproved``. Where the tool runs, ``verify_receipt`` and ``requires_receipt`` check the
receipt Countersign signed for the call (``docs/receipts.md``). It speaks only HTTP and
WebSockets and imports nothing of the service (``docs/integrations.md``)."""

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
from countersign.receipts import (
    RECEIPT_META_KEY,
    ReceiptBadSignature,
    ReceiptExpired,
    ReceiptInvalid,
    ReceiptMalformed,
    ReceiptMissing,
    ReceiptReplayed,
    ReceiptUnknownKey,
    ReceiptWrongArguments,
    ReceiptWrongIssuer,
    ReceiptWrongTool,
    ReplayGuard,
    current_receipt,
    receipt_context,
    requires_receipt,
    verify_receipt,
)

__all__ = [
    "RECEIPT_META_KEY",
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
    "ReceiptBadSignature",
    "ReceiptExpired",
    "ReceiptInvalid",
    "ReceiptMalformed",
    "ReceiptMissing",
    "ReceiptReplayed",
    "ReceiptUnknownKey",
    "ReceiptWrongArguments",
    "ReceiptWrongIssuer",
    "ReceiptWrongTool",
    "ReplayGuard",
    "ServiceUnavailable",
    "TimedOut",
    "TooLarge",
    "Unauthorized",
    "current_receipt",
    "receipt_context",
    "requires_receipt",
    "verify_receipt",
]
