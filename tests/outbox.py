"""Shared pieces of the outbox's tests: channels made as admins make them, held calls, and
the messages of a receiver (tests/receivers.py) read back as webhooks."""

from __future__ import annotations

import base64
import json
from typing import Any

from standardwebhooks import Webhook

from approvals.models import Agent, Call
from notifications.channels import channel_add
from notifications.models import NotificationChannel
from tests.factories import agent_make, call_make, payment, rule_make
from tests.receivers import Received

SECRET = "whsec_" + base64.b64encode(b"countersign-outbox-test-key-0123").decode()
# A webhook target whose path and query hold credentials, which audit entries must mask.
HOOK = "https://hooks.example.test/countersign/T0KEN-in-the-path?key=also-secret"
Event = NotificationChannel.Event
HOLD_RULE = "big: pay arg=amount max USD 500.00 -> gate finance"


def webhook_channel(url: str, **options: Any) -> NotificationChannel:
    """A webhook channel made by the service, as ``add_channel`` makes one."""
    return channel_add(kind="webhook", target=url, secret=SECRET, **options)


def holding_agent(name: str = "payments-bot") -> Agent:
    """An agent whose payments over USD 500.00 are held at gate ``finance``."""
    rule_make(line=HOLD_RULE)
    return agent_make(name=name, principal="carol")


def held(agent: Agent, amount: str = "1250.00", **options: Any) -> Call:
    call = call_make(agent=agent, arguments=payment(amount), **options)
    assert call.status == Call.Status.PENDING
    return call


def webhook_of(got: Received) -> dict[str, Any]:
    """A received request verified as a Standard Webhooks message; its body."""
    body: dict[str, Any] = Webhook(SECRET).verify(got.body, got.headers)
    return body


def event_and_call(got: Received) -> tuple[str, str]:
    body = json.loads(got.body)
    return body["type"], body["data"]["call"]["id"]
