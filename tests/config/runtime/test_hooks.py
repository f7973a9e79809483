"""Early warnings: each private or undocumented thing config/runtime/ relies on is still
there with the shape it uses (config/runtime/README.md lists them, with the versions they
were checked against). After an upgrade, a failure here names what to look at before the
pieces' own tests fail in stranger ways."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction
from channels.consumer import AsyncConsumer, get_handler_name
from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer, RedisLoopLayer
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3 import base as sqlite
from redis.asyncio import BlockingConnectionPool

from config.runtime.pooled_handler import PooledThreadASGIHandler


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _calls(function: Callable[..., Any], call: str) -> bool:
    return call in inspect.getsource(function)


# --- pooled_handler ---------------------------------------------------------------------------


def test_the_handler_builds_its_chain_in_load_middleware_from_init() -> None:
    """``load_middleware(is_async=...)``, called by ``ASGIHandler.__init__`` with
    ``is_async=True``: the override builds the synchronous chain instead."""
    assert _parameters(BaseHandler.load_middleware) == ["self", "is_async"]
    assert inspect.signature(BaseHandler.load_middleware).parameters["is_async"].default is False
    assert _calls(ASGIHandler.__init__, "self.load_middleware(is_async=True)")
    stock, pooled = ASGIHandler(), PooledThreadASGIHandler(threads=1)
    assert iscoroutinefunction(stock._middleware_chain)  # type: ignore[attr-defined]
    assert not iscoroutinefunction(pooled._middleware_chain)  # type: ignore[attr-defined]


# What ``ASGIHandler.handle`` and ``run_get_response`` do, in the order the override does it
# (with the receivers, the request, the chain and a whole response's close on one thread).
HANDLE_STEPS = (
    "body_file = await self.read_body(receive)",
    "set_script_prefix(get_script_prefix(scope))",
    "await signals.request_started.asend(sender=self.__class__, scope=scope)",
    "request, error_response = self.create_request(scope, body_file)",
    "await self.send_response(response, send)",
    "asyncio.create_task(self.listen_for_disconnect(receive))",
    "await signals.request_finished.asend(sender=self.__class__)",
    "await sync_to_async(response.close)()",
)
RUN_GET_RESPONSE_STEPS = (
    "await self.get_response_async(request)",
    "response._handler_class = self.__class__",
    "response.block_size = self.chunk_size",
)


def test_the_handlers_handle_is_the_one_the_override_reproduces() -> None:
    """``handle`` (undocumented) is replaced whole: it still takes these steps, in this
    order, and ``run_get_response`` still sets these on a response. A step added or changed
    by an upgrade must be added to the override."""
    for function, steps in (
        (ASGIHandler.handle, HANDLE_STEPS),
        (ASGIHandler.run_get_response, RUN_GET_RESPONSE_STEPS),
    ):
        source = inspect.getsource(function)
        places = [source.find(step) for step in steps]
        assert -1 not in places, [s for s, at in zip(steps, places, strict=True) if at < 0]
        assert places == sorted(places)
    assert _parameters(ASGIHandler.create_request) == ["self", "scope", "body_file"]
    assert _parameters(ASGIHandler.read_body) == ["self", "receive"]
    assert _parameters(ASGIHandler.listen_for_disconnect) == ["self", "receive"]
    assert _parameters(ASGIHandler.send_response) == ["self", "response", "send"]
    assert _parameters(BaseHandler.get_response) == ["self", "request"]


def test_the_handlers_call_is_a_thread_sensitive_context_around_handle() -> None:
    """``__call__(scope, receive, send)`` only wraps ``handle`` in a
    ``ThreadSensitiveContext``; the override gives that context an executor of its own."""
    assert iscoroutinefunction(ASGIHandler.__call__)
    assert _parameters(ASGIHandler.__call__) == ["self", "scope", "receive", "send"]
    assert iscoroutinefunction(ASGIHandler.handle)
    assert _parameters(ASGIHandler.handle) == ["self", "scope", "receive", "send"]
    assert _calls(ASGIHandler.__call__, "await self.handle(scope, receive, send)")
    executor = inspect.signature(ThreadSensitiveContext).parameters["executor"]
    assert executor.kind is inspect.Parameter.KEYWORD_ONLY


# --- sqlite_pooled ----------------------------------------------------------------------------


def test_closing_a_connection_goes_through_close_underscore() -> None:
    """``_close()``, the one place ``close()`` lets go of the DB-API connection; and the
    backend's ``get_new_connection(conn_params)`` opens one with ``check_same_thread`` off,
    so a connection may pass from thread to thread."""
    assert _parameters(BaseDatabaseWrapper._close) == ["self"]  # type: ignore[attr-defined]
    assert _calls(BaseDatabaseWrapper.close, "self._close()")
    assert _calls(sqlite.DatabaseWrapper.close, "BaseDatabaseWrapper.close(self)")
    assert _parameters(sqlite.DatabaseWrapper.get_new_connection) == ["self", "conn_params"]
    params = sqlite.DatabaseWrapper({**connection.settings_dict}).get_connection_params()
    assert params["check_same_thread"] is False


# --- memory_layer -----------------------------------------------------------------------------


def test_the_in_memory_layer_cleans_up_in_clean_expired_on_group_send_and_receive() -> None:
    assert _parameters(InMemoryChannelLayer._clean_expired) == ["self"]  # type: ignore[attr-defined]
    assert _calls(InMemoryChannelLayer.group_send, "self._clean_expired()")
    assert _calls(InMemoryChannelLayer.receive, "self._clean_expired()")


# --- redis_layer ------------------------------------------------------------------------------


def test_the_redis_layer_makes_each_pool_in_create_pool_from_its_hosts() -> None:
    """``create_pool(index)``, called for each host and event loop, and ``hosts`` as keyword
    dictionaries; redis-py's blocking pool takes ``timeout`` and ``max_connections``."""
    assert _parameters(RedisChannelLayer.create_pool) == ["self", "index"]
    assert _calls(RedisLoopLayer.get_connection, "self.channel_layer.create_pool(index)")
    layer = RedisChannelLayer(hosts=[{"address": "redis://127.0.0.1:1/0", "max_connections": 4}])
    assert layer.hosts == [{"address": "redis://127.0.0.1:1/0", "max_connections": 4}]
    assert {"timeout", "max_connections"} <= set(_parameters(BlockingConnectionPool.__init__))


# --- push_loop --------------------------------------------------------------------------------


def test_channels_redis_keeps_a_connection_per_event_loop() -> None:
    """Undocumented, and the reason for the push loop: a new loop means a new pool."""
    layer = RedisChannelLayer(hosts=["redis://127.0.0.1:1/0"])  # never connected to

    async def current() -> object:
        return layer.connection(0)

    one, other = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first = one.run_until_complete(current())
        assert one.run_until_complete(current()) is first
        assert other.run_until_complete(current()) is not first
    finally:
        one.close()
        other.close()


# --- sqlite_writers ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_connection_says_whether_it_is_inside_atomic() -> None:
    """``in_atomic_block``, undocumented: an inner write transaction takes no turn."""
    assert connection.in_atomic_block is False
    with transaction.atomic():
        assert connection.in_atomic_block is True


# --- consumer_dispatch ------------------------------------------------------------------------


def test_channels_dispatch_finds_handlers_by_name_and_closes_connections_first() -> None:
    """``get_handler_name`` (undocumented) names a message's handler as the piece finds it;
    ``AsyncConsumer.dispatch`` still runs ``aclose_old_connections()`` first, the reason for
    the piece (when it stops, the piece is needless)."""
    assert get_handler_name({"type": "sockets.close"}) == "sockets_close"
    assert _parameters(AsyncConsumer.dispatch) == ["self", "message"]
    assert _calls(AsyncConsumer.dispatch, "aclose_old_connections()")
