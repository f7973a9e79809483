"""Email: a plain-text and an HTML part, to the eligible approvers of the call's gates or to
fixed addresses, through Django's mail API (the ``EMAIL_*`` settings, docs/notifications.md).
The link opens the call page; nothing in a mail acts on a GET (mail scanners follow links).
An attempt, every mail of it, ends within ``COUNTERSIGN_NOTIFY_TIMEOUT`` by the clock
(``outbound.attempt_within``), however slowly the mail server answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.validators import validate_email
from django.db.models import Q
from django.template.loader import render_to_string

from approvals.models import Call
from approvals.selectors.deciders import DECIDE_PERMISSION
from approvals.selectors.gates import gates_groups
from notifications.senders.literal_text import MAIL
from notifications.senders.notice import Notice, notice_read
from notifications.senders.outbound import AttemptSockets, AttemptTimedOut, attempt_within
from notifications.senders.result import SendResult, scrub

if TYPE_CHECKING:
    from notifications.models import NotificationChannel
    from notifications.senders.message import Message

APPROVERS = "approvers"
SUBJECT_PREFIX = "[Countersign] "
NO_APPROVER_ADDRESS = "no eligible approver has an email address: nothing sent"
BAD_ADDRESS = "not an email address: {address}"
NO_ADDRESS = "the email target names no address"


def approver_addresses(call: Call) -> list[str]:
    """The addresses of the people who may decide ``call`` (selectors/deciders.py: active,
    holding the decide permission, in the group of every gate of the call kept to one, or
    superusers; not the call's principal), who have one."""
    app_label, codename = DECIDE_PERMISSION.split(".")
    permission = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    may = Q(is_superuser=True) | Q(user_permissions__in=permission)
    may |= Q(groups__permissions__in=permission)
    users = User.objects.filter(is_active=True).exclude(email="")
    users = users.exclude(**{User.USERNAME_FIELD: call.principal})
    users = users.filter(pk__in=User.objects.filter(may).values("pk"))
    for group in sorted(set(gates_groups(names=sorted(set(call.gates))).values())):
        members = User.groups.through.objects.filter(group_id=group).values("user_id")
        users = users.filter(Q(is_superuser=True) | Q(pk__in=members))
    return sorted(set(users.values_list("email", flat=True)))


def fixed_addresses(target: str) -> list[str]:
    """The comma-separated addresses of ``target``; ValidationError names a bad one."""
    addresses = [item.strip() for item in target.split(",") if item.strip()]
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            raise ValidationError(BAD_ADDRESS.format(address=address[:100])) from None
    return addresses


def email_message(*, notice: Notice, to: str) -> EmailMultiAlternatives:
    context = {"notice": notice}
    message = EmailMultiAlternatives(
        subject=SUBJECT_PREFIX + " ".join(notice.subject.split())[:180],
        body=render_to_string("notifications/email.txt", context),
        to=[to],
        headers={"Auto-Submitted": "auto-generated", "X-Countersign-Event": notice.event},
    )
    message.attach_alternative(render_to_string("notifications/email.html", context), "text/html")
    return message


def email_send(*, channel: NotificationChannel, notification: Message) -> SendResult:
    target = channel.target.strip()
    if target == APPROVERS:
        addresses = approver_addresses(Call.objects.get(pk=notification.call_id))
        if not addresses:
            return SendResult(ok=True, error=NO_APPROVER_ADDRESS)
    else:
        try:
            addresses = fixed_addresses(target)
        except ValidationError as exc:
            return SendResult(ok=False, error=" ".join(exc.messages)[:200])
        if not addresses:
            return SendResult(ok=False, error=NO_ADDRESS)
    notice = notice_read(notification=notification, text=MAIL)
    messages = [email_message(notice=notice, to=address) for address in addresses]
    timeout = settings.COUNTERSIGN_NOTIFY_TIMEOUT

    def deliver() -> None:
        with get_connection(timeout=timeout) as connection:
            connection.send_messages(messages)

    try:
        # The mail server is the operator's own (EMAIL_URL): any address is allowed.
        attempt_within(deliver, seconds=timeout, sockets=AttemptSockets(public_only=False))
    except AttemptTimedOut as exc:
        return exc.result()
    except Exception as exc:
        message = str(exc)
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        password = settings.EMAIL_HOST_PASSWORD
        if password:
            text = text.replace(password, "***")
        return SendResult(ok=False, error=scrub(text, channel=channel))
    return SendResult(ok=True)
