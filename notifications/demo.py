"""make run's notifications: mail to the approvers, printed by the server (the console mail
backend under DEBUG), and a webhook to the server's own receiver (``POST /demo/webhook``,
routed only under DEBUG), which verifies each webhook of the demo's channel with the
``standardwebhooks`` package, as a receiver of yours would (docs/notifications.md), and
prints it to the server's output."""

from __future__ import annotations

import json
import sys

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from notifications.channels import channel_add, channel_save
from notifications.models import NotificationChannel

DEMO_EMAIL_CHANNEL = "demo: mail to the approvers (printed by make run)"
DEMO_EMAIL_EVENTS = (NotificationChannel.Event.HELD, NotificationChannel.Event.EXPIRING)
DEMO_WEBHOOK_CHANNEL = "demo: webhook to make run's own receiver"
DEMO_WEBHOOK_PATH = "/demo/webhook"
RECEIVED = "Webhook verified ({id}): {type} · {tool} for {principal}, {status} · {url}"
REFUSED = "Webhook refused: {problem}"


def demo_channels_ensure(*, url: str) -> None:
    """The demo's two channels, made once (a channel an admin disabled stays so); the webhook
    is pointed at the receiver of the server about to start at ``url``, unless private
    targets are refused (``COUNTERSIGN_NOTIFY_PRIVATE_TARGETS=0``)."""
    if not NotificationChannel.objects.filter(name=DEMO_EMAIL_CHANNEL).exists():
        channel_add(
            kind=NotificationChannel.Kind.EMAIL,
            target="approvers",
            events=list(DEMO_EMAIL_EVENTS),
            name=DEMO_EMAIL_CHANNEL,
        )
    if not settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS:
        return  # its receiver is this server, at an address such a deployment refuses
    target = url.rstrip("/") + DEMO_WEBHOOK_PATH
    hook = NotificationChannel.objects.filter(name=DEMO_WEBHOOK_CHANNEL).first()
    if hook is None:
        channel_add(kind=NotificationChannel.Kind.WEBHOOK, target=target, name=DEMO_WEBHOOK_CHANNEL)
    elif hook.target != target:
        hook.target = target
        channel_save(channel=hook, user=None)


def demo_prepared_received(sender: object, *, url: str, **kwargs: object) -> None:
    """``approvals.services.demo.demo_prepared``: the demo is about to be served at ``url``."""
    demo_channels_ensure(url=url)


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
