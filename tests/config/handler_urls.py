"""A sync view that says which thread ran it, for tests/config/test_handler.py."""

from __future__ import annotations

import threading
import time

from django.http import HttpRequest, JsonResponse
from django.urls import path


def which_thread(request: HttpRequest) -> JsonResponse:
    first = threading.get_ident()
    time.sleep(float(request.GET.get("sleep", "0")))  # holds its thread, as a slow page would
    return JsonResponse({"first": first, "last": threading.get_ident()})


urlpatterns = [path("thread", which_thread)]
