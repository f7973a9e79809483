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
from typing import NamedTuple

from django.http import HttpRequest

from approvals.api.errors import AGENT_DISABLED, UNAUTHENTICATED, ApiError, Code
from approvals.models import Agent, AgentToken
from approvals.services.agents import agent_token_authenticate


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


class Bearer(NamedTuple):
    """Who is calling, and with which token: sockets and long-polls listen on the token's
    group, so that revoking it ends them (``notify.agent_sockets_close``)."""

    agent: Agent
    token_id: int


def bearer(*, authorization: Sequence[str]) -> Bearer:
    """The active agent these ``Authorization`` headers name, and its token. Raises
    ``ApiError``: ``401`` without one valid bearer token, ``403`` for a disabled agent. Reads
    the database."""
    token = bearer_token(authorization)
    found = None if token is None else agent_token_authenticate(token=token)
    if found is None:
        raise ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED)
    agent, token_id = found
    if not agent.active:
        raise ApiError(403, Code.AGENT_DISABLED, AGENT_DISABLED)
    return Bearer(agent, token_id)


def bearer_agent(*, authorization: Sequence[str]) -> Agent:
    """``bearer``'s agent."""
    return bearer(authorization=authorization).agent


def bearer_still_valid(*, token_id: int) -> None:
    """Raises ``bearer``'s ``ApiError`` if the token has been revoked (or deleted) or its
    agent disabled since it was read: a socket or long-poll that joined its groups checks
    again, as a revocation committed between its first reading and the joining would have
    been pushed to nobody."""
    found = AgentToken.objects.filter(pk=token_id).values_list("revoked_at", "agent__active")
    row = found.first()
    if row is None or row[0] is not None:
        raise ApiError(401, Code.UNAUTHENTICATED, UNAUTHENTICATED)
    if not row[1]:
        raise ApiError(403, Code.AGENT_DISABLED, AGENT_DISABLED)
