"""The connections of one attempt (notifications/senders/outbound.py): a mail server and an
Apprise service that answer a byte a second are cut off at ``COUNTERSIGN_NOTIFY_TIMEOUT`` by
the wall clock, their sending thread freed; with ``COUNTERSIGN_NOTIFY_PRIVATE_TARGETS=0``
every connection to a loopback or private address is refused, as resolved at send time."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

import pytest

from config.env import OutboundProxies, Proxy
from notifications.models import NotificationChannel
from notifications.senders import SendResult, send
from notifications.senders.outbound import (
    GRACE_SECONDS,
    REFUSED,
    TIMED_OUT,
    AttemptSockets,
    AttemptTimedOut,
    address_kind,
    attempt_within,
)
from tests.notifications.test_senders import channel, held_call, notification_of, verified, webhook
from tests.receivers import (
    dribbling_http_receiver,
    dribbling_smtp_server,
    http_receiver,
    raw_http_receiver,
)

pytestmark = pytest.mark.django_db
Kind = NotificationChannel.Kind
DEADLINE = 2
# Past the deadline: the grace for the attempt's thread, and a second for a loaded machine.
CUT_OFF_BY = DEADLINE + GRACE_SECONDS + 1


def attempt_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "notify-attempt"]


def timed(work: Any) -> tuple[Any, float]:
    began = time.monotonic()
    result = work()
    return result, time.monotonic() - began


@pytest.fixture
def deadline(settings: Any) -> int:
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = DEADLINE
    return DEADLINE


TIMED_OUT_ERROR = "TimeoutError: " + TIMED_OUT.format(seconds=DEADLINE)


# --- The deadline -----------------------------------------------------------------------------


def test_a_mail_server_answering_a_byte_a_second_is_cut_off_at_the_deadline(
    settings: Any, deadline: int
) -> None:
    """Each read of smtplib's is short of its timeout, so only the wall clock can end the
    attempt: at the deadline its connection is shut, and the sender is free again."""
    with dribbling_smtp_server(pause=1.0) as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        mail = channel(Kind.EMAIL, "ops@example.test")
        result, took = timed(lambda: send(channel=mail, notification=notification_of(held_call())))
        assert result == SendResult(ok=False, error=TIMED_OUT_ERROR)
        assert deadline <= took < CUT_OFF_BY
        # The server wrote part of its greeting, and saw the connection closed at the cut.
        assert server.wait_for(lambda s: len(s.closed_at) == 1, timeout=2)
        assert 0 < server.written[0] < 10
    assert not attempt_threads()


def test_an_apprise_service_answering_a_byte_a_second_is_cut_off_at_the_deadline(
    deadline: int,
) -> None:
    with dribbling_http_receiver(pause=1.0) as receiver:
        target = receiver.url.replace("http://", "json://")
        chat = channel(Kind.APPRISE, target)
        result, took = timed(lambda: send(channel=chat, notification=notification_of(held_call())))
        assert result == SendResult(ok=False, error=TIMED_OUT_ERROR)
        assert deadline <= took < CUT_OFF_BY
        assert receiver.wait_for(lambda r: len(r.closed_at) == 1, timeout=2)
        assert 0 < receiver.written[0] < 10
    assert not attempt_threads()


def test_an_attempt_that_outlives_its_deadline_connects_nowhere_after_it() -> None:
    """A thread still busy at the deadline (a name lookup cannot be cut) is left to end on
    its own, but whatever it tries to connect to afterwards is refused."""
    late = threading.Event()
    errors: list[BaseException] = []
    with http_receiver() as receiver:
        host, port = receiver.url.removeprefix("http://").split(":")

        def work() -> None:
            time.sleep(0.5 + GRACE_SECONDS)  # past the deadline and its grace
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except OSError as exc:
                errors.append(exc)
            finally:
                late.set()

        sockets = AttemptSockets(public_only=False)
        with pytest.raises(AttemptTimedOut):
            attempt_within(work, seconds=0.3, sockets=sockets)
        assert late.wait(5)
        assert [type(error) for error in errors] == [AttemptTimedOut]
        assert receiver.requests == []


def test_an_attempt_that_ends_in_time_keeps_its_result_and_its_error() -> None:
    sockets = AttemptSockets(public_only=False)
    assert attempt_within(lambda: 42, seconds=1, sockets=sockets) == 42

    def failing() -> None:
        raise ValueError("not in time: wrong")

    with pytest.raises(ValueError, match="wrong"):
        attempt_within(failing, seconds=1, sockets=sockets)


# --- Private targets --------------------------------------------------------------------------


@pytest.fixture
def public_only(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_PRIVATE_TARGETS = False


LOOPBACK_REFUSED = REFUSED.format(kind="loopback")


@pytest.mark.usefixtures("public_only")
def test_a_webhook_to_a_name_resolving_to_loopback_is_refused_at_send_time() -> None:
    """``localhost`` is a name, resolved when the message is sent: the connection is checked
    on the address it is opened to, and never opened."""
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        target = receiver.url.replace("127.0.0.1", "localhost") + "/hook"
        result = send(channel=webhook(target), notification=notification)
        assert receiver.requests == []
    assert result == SendResult(ok=False, error=LOOPBACK_REFUSED)


def test_by_default_loopback_receivers_get_their_messages() -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        target = receiver.url.replace("127.0.0.1", "localhost") + "/hook"
        assert send(channel=webhook(target), notification=notification).ok
        [got] = receiver.wait_for(1)
    assert verified(got)["data"]["call"]["id"] == str(notification.call_id)


@pytest.mark.usefixtures("public_only")
def test_an_apprise_service_at_a_loopback_address_is_refused_at_send_time() -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        target = receiver.url.replace("http://127.0.0.1", "json://localhost") + "/chat"
        result = send(channel=channel(Kind.APPRISE, target), notification=notification)
        assert receiver.requests == []
    assert result == SendResult(ok=False, error=LOOPBACK_REFUSED)


NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
PUBLIC_TARGET = "http://93.184.215.14/hook"  # a public address, reached only by the proxy


@pytest.mark.usefixtures("public_only")
def test_through_a_proxy_the_proxy_is_reached_and_a_private_target_refused_before(
    settings: Any,
) -> None:
    """The proxy is the operator's, on any address; the target's host, which the proxy
    connects to out of this process's sight, is resolved and checked first."""
    notification = notification_of(held_call())
    with raw_http_receiver([NO_CONTENT, NO_CONTENT]) as proxy:
        port = int(proxy.url.removeprefix("http://").split("/")[0].split(":")[1])
        settings.COUNTERSIGN_WEBHOOK_PROXIES = OutboundProxies(http=Proxy("127.0.0.1", port))
        public = send(channel=webhook(PUBLIC_TARGET), notification=notification)
        private = send(channel=webhook("http://localhost:9/hook"), notification=notification)
    assert public == SendResult(ok=True, status_code=204)
    assert private == SendResult(ok=False, error=LOOPBACK_REFUSED)
    assert [head[0] for head in proxy.heads] == [f"POST {PUBLIC_TARGET} HTTP/1.1"]


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("0.0.0.0", "private"),
        ("100.64.0.1", "non-public"),
        ("224.0.0.1", "non-public"),
        ("93.184.215.14", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_address_kinds(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind
