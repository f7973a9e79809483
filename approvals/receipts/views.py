"""``GET /.well-known/jwks.json``: the public keys receipts and audit heads are verified with
(docs/receipts.md, "Keys"), the signing key's first. No authentication: they are public, and
a tool server, a payment service or an auditor fetches them from anywhere, a browser too."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from approvals.receipts.keys import receipt_keys

# Verifiers cache the keys this long; a rotated-out key stays published (COUNTERSIGN_VERIFY_KEYS)
# for far longer, so no cached set ever lacks a key a live receipt needs.
CACHE_CONTROL = "public, max-age=300"


@require_safe
def jwks(request: HttpRequest) -> HttpResponse:
    response = JsonResponse(receipt_keys().jwks())
    response["Cache-Control"] = CACHE_CONTROL
    response["Access-Control-Allow-Origin"] = "*"
    return response
