"""A bare async Django JSON endpoint on the same server and settings as the app: the
baseline that bench/submit_bench.py measures the agent API against."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
async def bare(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True}, status=201)
