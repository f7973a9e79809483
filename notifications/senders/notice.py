"""What a notification tells a person, read once for every channel that writes to people
(email, Apprise): the call as committed in the payload, its amounts and agent from the
database, and the time left as of sending. Every text Countersign did not write is read as
the channel shows it (``literal_text``): a template cannot show it otherwise."""

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
    from notifications.senders.literal_text import LiteralText
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
    """A call's notice for one kind of channel: ``tool``, ``agent``, ``principal``,
    ``run_id`` and ``comment`` quoted, ``reasons`` and ``decided_by`` on one line each, as
    its ``LiteralText`` shows them."""

    event: str
    what: str
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
    def headline(self) -> str:
        """What happened, and who decided: a mail's first line, a subject's start."""
        if self.event == Event.DECIDED and self.decided_by:
            return f"{self.what} by {self.decided_by}"
        return self.what

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


def notice_read(*, notification: Message, text: LiteralText, now: datetime | None = None) -> Notice:
    """The notice of ``notification``: the call as its payload has it (the state when the
    event was committed), the amounts and agent's name from the database; the texts others
    wrote as ``text`` shows them."""
    call = Call.objects.select_related("agent", "decided_by").get(pk=notification.call_id)
    data = _data(notification)
    state: dict[str, Any] = data.get("call") or {}
    status = str(state.get("status") or call.status)
    expires_at = parse_datetime(state["expires_at"]) if state.get("expires_at") else None
    decision = state.get("decision") or {}
    event = notification.event
    if event == Event.DECIDED:
        what = DECIDED_HEADLINES.get(status, DECIDED_HEADLINE)
    else:
        what = HEADLINES.get(event, event)
    run_id, comment = str(state.get("run_id") or ""), str(decision.get("comment") or "")
    return Notice(
        event=event,
        what=what,
        tool=text.quoted(str(state.get("tool") or call.tool)),
        amounts=call_amounts(cap_assessments(call, stored_rules())),
        agent=text.quoted(call.agent.name),
        principal=text.quoted(str(state.get("principal") or call.principal)),
        run_id=text.quoted(run_id) if run_id else "",
        reasons=tuple(
            text.line(_reason(reason))
            for reason in state.get("reasons") or call.reasons
            if isinstance(reason, dict)
        ),
        gates=tuple(text.line(str(gate)) for gate in state.get("gates") or ()),
        status=status,
        expires_at=expires_at,
        time_left=time_left(expires_at, now or timezone.now()) if status == Status.PENDING else "",
        decided_by=text.line(str(decision.get("by") or "")),
        comment=text.quoted(comment) if comment else "",
        url=str(data.get("url") or ""),
    )
