"""Views that say which thread ran them, for tests/config/runtime/test_pooled_handler.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import AsyncIterator

from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.urls import path

# Set by a test to let ``held`` answer.
RELEASE = threading.Event()
HELD_AT_MOST = 10.0  # seconds: a test that forgets to release fails instead of hanging


def which_thread(request: HttpRequest) -> JsonResponse:
    first = threading.get_ident()
    time.sleep(float(request.GET.get("sleep", "0")))  # holds its thread, as a slow page would
    return JsonResponse(
        {
            "first": first,
            "last": threading.get_ident(),
            "name": threading.current_thread().name,
            "nice": os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
        }
    )


def held(request: HttpRequest) -> JsonResponse:
    """Holds its thread until the test sets ``RELEASE``."""
    released = RELEASE.wait(HELD_AT_MOST)
    return JsonResponse({"released": released, "name": threading.current_thread().name})


async def _parts() -> AsyncIterator[bytes]:
    yield b"one"
    yield b"two"


def streamed(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_parts())


async def which_thread_async(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"thread": threading.get_ident(), "user": request.user.is_anonymous})


urlpatterns = [
    path("thread", which_thread),
    path("own", which_thread),
    path("held", held),
    path("own-held", held),
    path("async", which_thread_async),
    path("streamed", streamed),
]
