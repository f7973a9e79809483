"""Which agent is calling: one reading of the bearer token for the API, the long-poll and the
agent sockets (docs/api.md, "Authentication").

The rule: exactly one ``Authorization`` header, of the scheme ``Bearer`` (in any case), whose
token is not empty, not revoked, and an active agent's. Two headers are refused even
when they agree: which one counts would be up to whichever layer read them. Django joins
repeated headers with a comma in ``request.headers``, so the headers are read from the ASGI
scope as they arrived.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.http import HttpRequest

from approvals.errors import AGENT_DISABLED, UNAUTHENTICATED, ApiError, Code
from approvals.models import Agent
from approvals.services.agents import agent_authenticate


def authorization_values(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """Every ``Authorization`` header among an ASGI scope's, in the order received."""
    return [
        bytes(value).decode("latin-1")
        for name, value in headers
        if name.lower() == b"authorization"
    ]


def request_authorization(request: HttpRequest) -> list[str]:
    """Every ``Authorization`` header of a Django request. A WSGI request (Django's test
    client) keeps only one value per name: that one."""
    scope = getattr(request, "scope", None)
    if scope is not None:
        return authorization_values(scope["headers"])
    value = request.META.get("HTTP_AUTHORIZATION")
    return [] if value is None else [value]


def bearer_token(authorization: Sequence[str]) -> str | None:
    """The token of exactly one ``Authorization: Bearer <token>`` header, else None."""
    if len(authorization) != 1:
        return None
    scheme, _, token = authorization[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def bearer_agent(*, authorization: Sequence[str]) -> Agent:
    """The active agent these ``Authorization`` headers name. Raises ``ApiError``: ``401``
    without one valid bearer token, ``403`` for a disabled agent. Reads the database."""
    token = bearer_token(authorization)
    agent = None if token is None else agent_authenticate(token=token)
    if agent is None:
        raise ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED)
    if not agent.active:
        raise ApiError(403, Code.AGENT_DISABLED, AGENT_DISABLED)
    return agent
