"""Notification channels: checked, stored and audited, their secrets and their targets'
credentials masked in the audit entries."""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Sequence
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from approvals.errors import Invalid
from approvals.models import AuditEntry, Gate
from approvals.services.audit import audit_record
from notifications.models import NotificationChannel
from notifications.senders.outbound import host_kind
from notifications.senders.webhook import secret_valid, webhook_url

Event = NotificationChannel.Event
Kind = NotificationChannel.Kind

ALL_EVENTS: tuple[str, ...] = tuple(Event.values)
WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix)
MASK = "***"

UNKNOWN_KIND = "unknown channel kind {kind!r}: email, webhook or apprise"
UNKNOWN_EVENT = "unknown event {event!r}: one of " + ", ".join(ALL_EVENTS)
NO_EVENT = "a channel needs at least one event"
UNKNOWN_GATE = "no gate named {gate!r}"
NO_TARGET = "a channel needs a target"
BAD_EMAIL_TARGET = "an email target is 'approvers' or comma-separated addresses; not: {address!r}"
BAD_WEBHOOK_TARGET = "a webhook target is an http(s) URL with a host"
BAD_APPRISE_TARGET = "an Apprise target is a URL such as slack://… or ntfy://…"
UNKNOWN_APPRISE_SCHEME = (
    "Apprise knows no service {scheme}://: see https://github.com/caronc/apprise/wiki for "
    "your service's URL"
)
APPRISE_UNAVAILABLE = "the {scheme}:// service of Apprise cannot be used on this server"
BAD_APPRISE_URL = "the parts of this {scheme}:// URL do not make a URL Apprise can send to"
PRIVATE_TARGET = (
    "the target's host is a {kind} address, refused while COUNTERSIGN_NOTIFY_PRIVATE_TARGETS=0"
)
# A scheme named back in a message: only one that is a scheme at all (RFC 3986).
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,31}", re.ASCII)
BAD_SECRET = "a webhook secret is 'whsec_' and base64"  # noqa: S105 (a message)
SECRET_NOT_WEBHOOK = "only a webhook channel has a secret"  # noqa: S105 (a message)


class ChannelInvalid(Invalid):
    """A channel as given cannot be stored; the message says why, naming no secret."""


def webhook_secret_new() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def masked_target(kind: str, target: str) -> str:
    """A target as logs and audit entries show it: an email target whole (addresses are no
    secret), a URL's scheme and host only (its user, password, path and query may each be a
    credential), an Apprise URL's scheme only (its host may be a token too)."""
    if kind == Kind.EMAIL:
        return target
    try:
        url = urlsplit(target)
    except ValueError:
        return MASK
    if kind == Kind.WEBHOOK and url.hostname:
        port = f":{url.port}" if url.port else ""
        rest = MASK if (url.path not in ("", "/") or url.query or url.username) else ""
        return f"{url.scheme}://{url.hostname}{port}/{rest}"
    return f"{url.scheme}://{MASK}" if url.scheme else MASK


def channel_snapshot(channel: NotificationChannel) -> str:
    """A channel as an audit entry's ``before`` or ``after``: its secret and its target's
    credentials masked."""
    return json.dumps(
        {
            "name": channel.name,
            "kind": channel.kind,
            "target": masked_target(channel.kind, channel.target),
            "secret": MASK if channel.secret else "",
            "events": list(channel.events),
            "gates": list(channel.gates),
            "enabled": channel.enabled,
        },
        sort_keys=True,
    )


def channel_check(
    *, kind: str, target: str, events: Sequence[str], gates: Sequence[str], secret: str
) -> None:
    """Raise ``ChannelInvalid`` unless a channel so made can be stored and used."""
    if kind not in Kind.values:
        raise ChannelInvalid(UNKNOWN_KIND.format(kind=kind))
    if not target.strip():
        raise ChannelInvalid(NO_TARGET)
    if not events:
        raise ChannelInvalid(NO_EVENT)
    for event in events:
        if event not in ALL_EVENTS:
            raise ChannelInvalid(UNKNOWN_EVENT.format(event=event))
    known = set(Gate.objects.filter(name__in=list(gates)).values_list("name", flat=True))
    for gate in gates:
        if gate not in known:
            raise ChannelInvalid(UNKNOWN_GATE.format(gate=gate))
    if secret and kind != Kind.WEBHOOK:
        raise ChannelInvalid(SECRET_NOT_WEBHOOK)
    if kind == Kind.EMAIL and target.strip() != "approvers":
        for address in (part.strip() for part in target.split(",")):
            try:
                validate_email(address)
            except ValidationError:
                raise ChannelInvalid(BAD_EMAIL_TARGET.format(address=address)) from None
    elif kind == Kind.WEBHOOK:
        url = webhook_url(target.strip())  # read as the sender reads it
        if url is None:
            raise ChannelInvalid(BAD_WEBHOOK_TARGET)
        if not secret_valid(secret):
            raise ChannelInvalid(BAD_SECRET)
        private = host_kind(url.host)
        if private is not None and not settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS:
            raise ChannelInvalid(PRIVATE_TARGET.format(kind=private))
    elif kind == Kind.APPRISE:
        apprise_target_check(target.strip())


def apprise_target_check(target: str) -> None:
    """Raise ``ChannelInvalid`` unless Apprise's own parser makes a service of ``target``:
    an unknown scheme, a service this server cannot use, or parts its service does not take
    are each refused, as sending would be every time."""
    # Imported here: Apprise loads every service it has, which saving a channel alone needs.
    import apprise

    from notifications.senders.via_apprise import service_host

    scheme, sep, rest = target.partition("://")
    if not sep or not scheme or not rest:
        raise ChannelInvalid(BAD_APPRISE_TARGET)
    service = apprise.Apprise.instantiate(target, asset=apprise.AppriseAsset(storage_mode="memory"))
    if service is None:
        scheme = scheme.lower()
        if not _SCHEME.fullmatch(scheme):
            raise ChannelInvalid(BAD_APPRISE_TARGET)
        # Apprise's registry of services, one per process (its constructor is not typed).
        services = apprise.NotificationManager()  # type: ignore[no-untyped-call]
        if scheme not in services:
            raise ChannelInvalid(UNKNOWN_APPRISE_SCHEME.format(scheme=scheme))
        if not services[scheme].enabled:
            raise ChannelInvalid(APPRISE_UNAVAILABLE.format(scheme=scheme))
        raise ChannelInvalid(BAD_APPRISE_URL.format(scheme=scheme))
    private = host_kind(service_host(service))
    if private is not None and not settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS:
        raise ChannelInvalid(PRIVATE_TARGET.format(kind=private))


def channel_add(
    *,
    kind: str,
    target: str,
    events: Sequence[str] | None = None,
    gates: Sequence[str] = (),
    secret: str | None = None,
    name: str = "",
    user: User | None = None,
) -> NotificationChannel:
    """Create a channel, audited. ``events`` None: all five. A webhook without ``secret``
    gets a new one (the caller shows it once). ``ChannelInvalid``: nothing is created."""
    events = list(ALL_EVENTS if events is None else events)
    if secret is None:
        secret = webhook_secret_new() if kind == Kind.WEBHOOK else ""
    channel_check(kind=kind, target=target, events=events, gates=list(gates), secret=secret)
    channel = NotificationChannel(
        name=name,
        kind=kind,
        target=target.strip(),
        secret=secret,
        events=events,
        gates=list(gates),
    )
    with transaction.atomic():
        channel.save()
        channel_audit(channel=channel, user=user, change=False, before="")
    return channel


def channel_audit(
    *, channel: NotificationChannel, user: User | None, change: bool, before: str
) -> None:
    """The entry of a channel saved in admin or by ``add_channel``, its secrets masked."""
    audit_record(
        action=AuditEntry.Action.ADMIN_CHANGE if change else AuditEntry.Action.ADMIN_ADD,
        object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL,
        object_id=str(channel.pk),
        user=user,
        before=before,
        after=channel_snapshot(channel),
    )


def channel_save(*, channel: NotificationChannel, user: User | None) -> None:
    """Save a channel changed in memory (admin's form checks it first), audited;
    ``ChannelInvalid``: nothing is saved."""
    channel_check(
        kind=channel.kind,
        target=channel.target,
        events=list(channel.events),
        gates=list(channel.gates),
        secret=channel.secret,
    )
    with transaction.atomic():
        stored = None
        if channel.pk is not None:
            stored = NotificationChannel.objects.filter(pk=channel.pk).first()
        before = "" if stored is None else channel_snapshot(stored)
        channel.save()
        channel_audit(channel=channel, user=user, change=stored is not None, before=before)


def channel_delete(*, channel: NotificationChannel, user: User | None) -> None:
    """Delete a channel and its messages, audited."""
    with transaction.atomic():
        object_id, before = channel.pk, channel_snapshot(channel)
        channel.delete()
        audit_record(
            action=AuditEntry.Action.ADMIN_DELETE,
            object_type=AuditEntry.ObjectType.NOTIFICATION_CHANNEL,
            object_id=str(object_id),
            user=user,
            before=before,
        )
