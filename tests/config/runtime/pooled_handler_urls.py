"""Views that say which thread ran them, for tests/config/runtime/test_pooled_handler.py."""

from __future__ import annotations

import threading
import time

from django.http import HttpRequest, JsonResponse
from django.urls import path


def which_thread(request: HttpRequest) -> JsonResponse:
    first = threading.get_ident()
    time.sleep(float(request.GET.get("sleep", "0")))  # holds its thread, as a slow page would
    return JsonResponse({"first": first, "last": threading.get_ident()})


async def which_thread_async(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"thread": threading.get_ident(), "user": request.user.is_anonymous})


urlpatterns = [path("thread", which_thread), path("async", which_thread_async)]
