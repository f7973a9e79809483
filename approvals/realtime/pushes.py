"""The one place that sends to the channel layer.

Pushes are hints: they are sent after the transaction commits, carry the call's full state,
and whoever misses one rebuilds from the database on (re)connect.

Access that ends is pushed too: every agent socket and long-poll listens on a group of the
token it authenticated with and one of its agent, every page socket on a group of its person
and one of its session, and a ``sockets.close`` message sent there closes them on every
worker (docs/reliability.md, "Access ends when it is taken away"). A lost close message is
caught later: agent sockets read the token again now and then, page sockets check their
session before each push and every minute.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest

from approvals.api.errors import CLOSE_CODE_BASE
from approvals.models import Approval, Call
from approvals.selectors.calls import call_state
from config.runtime.push_loop import push_from_sync

logger = logging.getLogger(__name__)

QUEUE_GROUP = "queue"
CALL_CHANGED = "call.changed"
SOCKETS_CLOSE = "sockets.close"

# The close codes of access taken away: those of the refusal the HTTP API now answers.
CLOSE_TOKEN_REVOKED = CLOSE_CODE_BASE + 401
CLOSE_AGENT_DISABLED = CLOSE_CODE_BASE + 403
CLOSE_PERSON = CLOSE_CODE_BASE + 403  # the pages say "log in again"


def call_group(call_id: object) -> str:
    return f"call.{call_id}"


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def token_group(token_id: int) -> str:
    """Every agent socket and long-poll that authenticated with this token."""
    return f"token.{token_id}"


def agent_sockets_group(agent_id: int) -> str:
    """Every agent socket and long-poll of this agent (``agent_group`` carries its calls'
    changes, to the stream sockets only)."""
    return f"agent-sockets.{agent_id}"


def person_group(user_id: int) -> str:
    """Every page socket of this person."""
    return f"person.{user_id}"


def session_group(session_key: str) -> str:
    """Every page socket of this session, named by a digest: the key itself is a credential,
    and Redis is no place to keep one."""
    return "session." + hashlib.sha256(session_key.encode()).hexdigest()[:32]


Push = tuple[list[str], dict[str, Any]]  # the groups, and the message sent to each


async def _send(layer: BaseChannelLayer, pushes: list[Push]) -> None:
    """Runs after the commit: the write stands whatever happens here, so a failing channel
    layer is logged and the request goes on to answer with what was stored. Whoever misses
    the push reads the database (waiters poll it, sockets get the state on reconnect)."""
    for groups, message in pushes:
        for group in groups:
            try:
                await layer.group_send(group, message)
            except Exception:
                logger.warning(
                    "push to %s failed; waiters fall back to the database", group, exc_info=True
                )


_together = threading.local()


@contextmanager
def pushes_together() -> Iterator[None]:
    """Within: the pushes of every commit are kept, and sent in one hop to the event loop,
    in order, when the block ends (a batch of decisions, not one hop per call). A
    transaction's pushes are kept only if it commits, as ever."""
    if getattr(_together, "pushes", None) is not None:  # the outer block sends them
        yield
        return
    pushes: list[Push] = []
    _together.pushes = pushes
    try:
        yield
    finally:
        _together.pushes = None
        _send_now(pushes)


def _send_now(pushes: list[Push]) -> None:
    """Send, one writer's pushes in order (``push_from_sync``)."""
    layer = get_channel_layer()
    if layer is None or not pushes:
        return
    push_from_sync(layer, _send, layer, pushes)


def _deliver(groups: list[str], message: dict[str, Any]) -> None:
    kept: list[Push] | None = getattr(_together, "pushes", None)
    if kept is None:
        _send_now([(groups, message)])
    else:
        kept.append((groups, message))


def notify_call(call: Call, *, approvals: Iterable[Approval] | None = None) -> None:
    """After commit, tell everyone watching this call, its agent, or the queue. Pass the
    call's ``approvals`` (with their users) when they are at hand, to save reading them."""
    message = {"type": CALL_CHANGED, "call": call_state(call, approvals=approvals)}
    groups = [call_group(call.pk), agent_group(call.agent_id), QUEUE_GROUP]
    # One hop to an event loop per push, not one per group.
    transaction.on_commit(lambda: _deliver(groups, message))


def _close_after_commit(groups: list[str], code: int) -> None:
    message = {"type": SOCKETS_CLOSE, "code": code}
    transaction.on_commit(lambda: _deliver(groups, message))


def agent_sockets_close(
    *, token_ids: Iterable[int] = (), agent_id: int | None = None, code: int
) -> None:
    """After commit, close with ``code`` every agent socket, and answer every long-poll, that
    authenticated with one of ``token_ids`` or (``agent_id``) with any token of that agent:
    ``CLOSE_TOKEN_REVOKED`` (a long-poll answers ``401``) or ``CLOSE_AGENT_DISABLED``
    (``403``)."""
    groups = [token_group(token_id) for token_id in token_ids]
    if agent_id is not None:
        groups.append(agent_sockets_group(agent_id))
    if groups:
        _close_after_commit(groups, code)


def person_sockets_close(*, user_id: int) -> None:
    """After commit, close every page socket of this person with ``CLOSE_PERSON``: they were
    deactivated, their password changed, or their permissions to see the pages may be gone.
    A page whose session still holds reconnects when the person reloads it."""
    _close_after_commit([person_group(user_id)], CLOSE_PERSON)


def session_sockets_close(*, session_key: str) -> None:
    """After commit, close every page socket of this session with ``CLOSE_PERSON``."""
    _close_after_commit([session_group(session_key)], CLOSE_PERSON)


@receiver(user_logged_out, dispatch_uid="countersign-logout-closes-sockets")
def _logged_out(sender: object, request: HttpRequest | None, **kwargs: object) -> None:
    """A logout ends that session's sockets, not the person's others (another browser stays
    logged in). Django flushes the session after this signal, so the key is still there."""
    session = getattr(request, "session", None)
    if session is not None and session.session_key:
        session_sockets_close(session_key=session.session_key)
