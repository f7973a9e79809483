"""What a notification tells a person, read once for every channel that writes to people
(email, Apprise): the call as committed in the payload, its amounts and agent from the
database, and the time left as of sending."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

import capcore
from approvals.models import Call
from approvals.selectors.caps import call_amounts, cap_assessments
from approvals.selectors.rules import stored_rules
from approvals.templatetags.clock import time_left
from approvals.templatetags.money import money
from notifications.models import NotificationChannel

if TYPE_CHECKING:
    from notifications.senders.message import Message

Event = NotificationChannel.Event
Status = Call.Status

# What happened, as a mail's subject and a message's title begin.
HEADLINES: dict[str, str] = {
    Event.HELD: "Waiting for approval",
    Event.EXPIRING: "Expiring soon",
    Event.EXPIRED: "Expired undecided",
    Event.CANCELLED: "Cancelled by its agent",
}
DECIDED_HEADLINES: dict[str, str] = {Status.APPROVED: "Approved", Status.DENIED: "Denied"}
DECIDED_HEADLINE = "Decided"


@dataclass(frozen=True)
class Notice:
    event: str
    headline: str
    tool: str
    amounts: tuple[capcore.Limit, ...]
    agent: str
    principal: str
    run_id: str
    reasons: tuple[str, ...]
    gates: tuple[str, ...]
    status: str
    expires_at: datetime | None
    time_left: str
    decided_by: str
    comment: str
    url: str

    @property
    def pending(self) -> bool:
        return self.status == Status.PENDING

    @property
    def amount_text(self) -> str:
        return ", ".join(money(amount) for amount in self.amounts)

    @property
    def subject(self) -> str:
        """One line: what happened, the tool and its amounts, for whom."""
        amounts = f" {self.amount_text}" if self.amounts else ""
        return f"{self.headline}: {self.tool}{amounts} for {self.principal}"


def _data(notification: Message) -> dict[str, Any]:
    try:
        payload = json.loads(notification.payload)
        data = payload["data"]
        if isinstance(data, dict) and isinstance(data.get("call"), dict):
            return data
    except (ValueError, KeyError, TypeError):
        pass
    return {}


def _reason(reason: dict[str, Any]) -> str:
    """A reason's message, and the rule that gave it (as the queue's "held by")."""
    message, rule = str(reason.get("message") or ""), str(reason.get("rule") or "")
    if message and rule:
        return f"{message} (rule {rule})"
    return message or rule


def notice_read(*, notification: Message, now: datetime | None = None) -> Notice:
    """The notice of ``notification``: the call as its payload has it (the state when the
    event was committed), the amounts and agent's name from the database."""
    call = Call.objects.select_related("agent", "decided_by").get(pk=notification.call_id)
    data = _data(notification)
    state: dict[str, Any] = data.get("call") or {}
    status = str(state.get("status") or call.status)
    expires_at = parse_datetime(state["expires_at"]) if state.get("expires_at") else None
    decision = state.get("decision") or {}
    event = notification.event
    if event == Event.DECIDED:
        headline = DECIDED_HEADLINES.get(status, DECIDED_HEADLINE)
        if decision.get("by"):
            headline = f"{headline} by {decision['by']}"
    else:
        headline = HEADLINES.get(event, event)
    return Notice(
        event=event,
        headline=headline,
        tool=str(state.get("tool") or call.tool),
        amounts=call_amounts(cap_assessments(call, stored_rules())),
        agent=call.agent.name,
        principal=str(state.get("principal") or call.principal),
        run_id=str(state.get("run_id") or ""),
        reasons=tuple(
            _reason(reason)
            for reason in state.get("reasons") or call.reasons
            if isinstance(reason, dict)
        ),
        gates=tuple(str(gate) for gate in state.get("gates") or ()),
        status=status,
        expires_at=expires_at,
        time_left=time_left(expires_at, now or timezone.now()) if status == Status.PENDING else "",
        decided_by=str(decision.get("by") or ""),
        comment=str(decision.get("comment") or ""),
        url=str(data.get("url") or ""),
    )
