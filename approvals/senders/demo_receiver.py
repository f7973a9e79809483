"""make run's own webhook receiver (``POST /demo/webhook``, routed only under DEBUG): it
verifies each webhook of the demo's channel with the ``standardwebhooks`` package, as a
receiver of yours would (docs/notifications.md), and prints it to the server's output."""

from __future__ import annotations

import json
import sys

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from approvals.models import NotificationChannel
from approvals.services.demo import DEMO_WEBHOOK_CHANNEL

RECEIVED = "Webhook verified ({id}): {type} · {tool} for {principal}, {status} · {url}"
REFUSED = "Webhook refused: {problem}"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@csrf_exempt
@require_POST
def demo_webhook(request: HttpRequest) -> HttpResponse:
    secrets = NotificationChannel.objects.filter(
        name=DEMO_WEBHOOK_CHANNEL, kind=NotificationChannel.Kind.WEBHOOK
    ).values_list("secret", flat=True)
    problem = "no demo webhook channel"
    for secret in secrets:
        try:
            message = Webhook(secret).verify(request.body, dict(request.headers))
        except (WebhookVerificationError, ValueError) as exc:
            problem = str(exc)
            continue
        data = message.get("data", {}) if isinstance(message, dict) else {}
        call = data.get("call", {}) if isinstance(data, dict) else {}
        _say(
            RECEIVED.format(
                id=request.headers.get("webhook-id", ""),
                type=message.get("type", "?"),
                tool=call.get("tool", "?"),
                principal=call.get("principal", "?"),
                status=call.get("status", "?"),
                url=data.get("url", ""),
            )
        )
        return HttpResponse(status=204)
    _say(REFUSED.format(problem=problem))
    return HttpResponse(json.dumps({"error": problem}), status=401, content_type="application/json")
