"""Sending one notification (notifications/senders/): webhooks verified by a real receiver with
the ``standardwebhooks`` package, mail received by a real SMTP server (aiosmtpd) in this
process, Apprise through its real ``json://`` scheme to a local receiver."""

from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from approvals.models import Call
from approvals.selectors.calls import call_state
from approvals.selectors.deciders import decidable_call_ids
from notifications.models import Notification, NotificationChannel
from notifications.senders import SendResult, send
from notifications.senders import webhook as webhooks
from notifications.senders.mail import BAD_ADDRESS, NO_APPROVER_ADDRESS, approver_addresses
from notifications.senders.via_apprise import NOT_APPRISE
from notifications.senders.webhook import (
    ANSWER_LIMIT,
    BAD_ANSWER,
    BAD_SECRET,
    NOT_HTTP,
    REDIRECT_NOT_FOLLOWED,
    TIMED_OUT,
)
from tests.factories import agent_make, call_make, gate_make, payment, rule_make, user_make
from tests.live import free_port
from tests.receivers import (
    Received,
    http_receiver,
    raw_http_receiver,
    self_signed,
    serve_each_connection,
    smtp_receiver,
)

pytestmark = pytest.mark.django_db
SECRET = "whsec_" + base64.b64encode(b"countersign-test-key-0123456789").decode()
PUBLIC = "http://approvals.example.test"
URL_IN_TEXT = re.compile(r"https?://[^\s\"'<>]+")
Event = NotificationChannel.Event
Kind = NotificationChannel.Kind


def held_call() -> Call:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate finance")
    agent = agent_make(name="payments-bot", principal="carol")
    call = call_make(agent=agent, arguments=payment("1250.00"), run_id="run-7")
    assert call.status == Call.Status.PENDING
    return call


def notification_of(call: Call, event: str = Event.HELD) -> Notification:
    """A message as the outbox writes it (unsaved: sending reads only its fields)."""
    payload = {
        "type": event,
        "timestamp": timezone.now().isoformat(),
        "data": {"call": call_state(call), "url": f"{PUBLIC}/calls/{call.pk}/"},
    }
    now = timezone.now()
    return Notification(
        id=uuid.uuid4(),
        call=call,
        event=event,
        payload=json.dumps(payload),
        created_at=now,
        next_attempt_at=now,
    )


def channel(kind: str, target: str, secret: str = "") -> NotificationChannel:
    return NotificationChannel(kind=kind, target=target, secret=secret, events=list(Event.values))


def webhook(url: str, secret: str = SECRET) -> NotificationChannel:
    return channel(Kind.WEBHOOK, url, secret)


def verified(got: Received, secret: str = SECRET) -> Any:
    return Webhook(secret).verify(got.body, got.headers)


# --- Webhooks -----------------------------------------------------------------------------


def test_a_webhook_is_the_payload_signed_per_standard_webhooks() -> None:
    call = held_call()
    notification = notification_of(call)
    with http_receiver() as receiver:
        hook = channel(Kind.WEBHOOK, f"{receiver.url}/hooks/countersign", SECRET)
        first = send(channel=hook, notification=notification)
        again = send(channel=hook, notification=notification)
        one, two = receiver.wait_for(2)
    assert first == again == SendResult(ok=True, status_code=204)
    assert one.path == "/hooks/countersign"
    assert one.headers["content-type"] == "application/json"
    assert one.body == notification.payload.encode()
    body = verified(one)
    assert body["type"] == "call.held"
    assert body["data"]["call"]["id"] == str(call.pk)
    assert body["data"]["url"] == f"{PUBLIC}/calls/{call.pk}/"
    # Stable across retries: the receiver deduplicates by it.
    assert one.headers["webhook-id"] == two.headers["webhook-id"] == f"msg_{notification.id.hex}"
    assert verified(two) == body
    assert one.headers["webhook-signature"].startswith("v1,")


def test_a_receiver_with_another_secret_refuses_the_signature() -> None:
    notification = notification_of(held_call())
    other = "whsec_" + base64.b64encode(b"not-the-secret-of-this-channel!").decode()
    with http_receiver() as receiver:
        assert send(channel=webhook(receiver.url), notification=notification).ok
        [got] = receiver.wait_for(1)
    with pytest.raises(WebhookVerificationError):
        verified(got, other)
    tampered = Received(got.method, got.path, got.headers, got.body.replace(b"pay", b"PAY"))
    with pytest.raises(WebhookVerificationError):
        verified(tampered)


@pytest.mark.parametrize("status", [200, 201, 202, 299])
def test_any_2xx_is_delivered(status: int) -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        receiver.answer = lambda _: (status, {})
        result = send(channel=webhook(receiver.url), notification=notification)
    assert result == SendResult(ok=True, status_code=status)


def test_a_redirect_is_a_failed_attempt_and_not_followed() -> None:
    notification = notification_of(held_call())
    with http_receiver() as elsewhere, http_receiver() as receiver:
        receiver.answer = lambda _: (302, {"location": f"{elsewhere.url}/moved"})
        result = send(channel=webhook(receiver.url), notification=notification)
        assert len(receiver.requests) == 1
        assert elsewhere.requests == []
    assert result == SendResult(
        ok=False, status_code=302, error=REDIRECT_NOT_FOLLOWED.format(status=302)
    )


def test_a_server_error_is_a_failed_attempt_with_its_status() -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        receiver.answer = lambda _: (503, {})
        result = send(channel=webhook(receiver.url), notification=notification)
    assert (result.ok, result.status_code, result.error) == (False, 503, "HTTP 503")


def test_a_receiver_that_never_answers_is_a_failed_attempt(settings: Any) -> None:
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = 1
    notification = notification_of(held_call())
    hang = threading.Event()
    with http_receiver(hang=hang) as receiver:
        result = send(channel=webhook(receiver.url), notification=notification)
        hang.set()
    assert not result.ok
    assert result.status_code is None
    assert result.error.startswith("TimeoutError")


def test_errors_name_no_credentials_and_no_secret() -> None:
    notification = notification_of(held_call())
    closed = f"http://hookuser:Sup3rS3cretPw@127.0.0.1:{free_port()}/t0ken-in-path"
    result = send(channel=channel(Kind.WEBHOOK, closed, SECRET), notification=notification)
    assert not result.ok
    assert result.error.startswith("ConnectionRefusedError")
    for secret in ("Sup3rS3cretPw", "hookuser", "t0ken-in-path", SECRET):
        assert secret not in result.error
    bad = send(channel=webhook(closed, "s3cret-but-no-prefix"), notification=notification)
    assert bad == SendResult(ok=False, error=BAD_SECRET)
    ftp = send(channel=channel(Kind.WEBHOOK, "ftp://x/y", SECRET), notification=notification)
    assert ftp == SendResult(ok=False, error=NOT_HTTP)


def test_a_user_and_password_in_the_url_are_sent_as_basic_authentication() -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        target = receiver.url.replace("://", "://hook%40user:pa%3Ass@") + "/in/caf\u00e9?x=1"
        assert send(channel=webhook(target), notification=notification).ok
        [got] = receiver.wait_for(1)
    assert got.path == "/in/caf%C3%A9?x=1"
    assert got.headers["authorization"] == "Basic " + base64.b64encode(b"hook@user:pa:ss").decode()


def test_an_https_receiver_gets_messages_only_with_a_certificate_trusted_for_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    notification = notification_of(held_call())
    ours = self_signed(ip="127.0.0.1")
    with http_receiver(tls=ours.server) as receiver:
        untrusted = send(channel=webhook(receiver.url), notification=notification)
        trusting = ssl.create_default_context(cadata=ours.pem)
        monkeypatch.setattr(webhooks, "tls_context", lambda: trusting)
        trusted = send(channel=webhook(receiver.url), notification=notification)
        [got] = receiver.wait_for(1)
    assert not untrusted.ok
    assert untrusted.error.startswith("SSLCertVerificationError")
    assert trusted == SendResult(ok=True, status_code=204)
    assert verified(got)["data"]["call"]["id"] == str(notification.call_id)
    # A certificate that is trusted, but for another name, is refused too.
    assert_refused_for_another_name(notification, monkeypatch)


def test_an_https_receiver_at_an_ipv6_address_gets_messages_for_its_certificate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The certificate is checked against the address itself; the ``Host`` header names it
    in brackets, as the target's URL does."""
    notification = notification_of(held_call())
    ours = self_signed(ip="::1")
    with http_receiver(tls=ours.server, ipv6=True) as receiver:
        trusting = ssl.create_default_context(cadata=ours.pem)
        monkeypatch.setattr(webhooks, "tls_context", lambda: trusting)
        sent = send(channel=webhook(f"{receiver.url}/in"), notification=notification)
        assert sent == SendResult(ok=True, status_code=204)
        [got] = receiver.wait_for(1)
    assert got.headers["host"] == receiver.url.removeprefix("https://")
    assert verified(got)["data"]["call"]["id"] == str(notification.call_id)
    other = self_signed(ip="::2")
    with http_receiver(tls=other.server, ipv6=True) as receiver:
        trusting = ssl.create_default_context(cadata=other.pem)
        monkeypatch.setattr(webhooks, "tls_context", lambda: trusting)
        refused = send(channel=webhook(receiver.url), notification=notification)
        assert receiver.requests == []
    assert refused.error.startswith("SSLCertVerificationError")


def assert_refused_for_another_name(
    notification: Notification, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver whose certificate is trusted but names another host gets nothing, and the
    attempt fails on the certificate."""
    elsewhere = self_signed(dns="elsewhere.example.test")
    with http_receiver(tls=elsewhere.server) as receiver:
        trusting = ssl.create_default_context(cadata=elsewhere.pem)
        monkeypatch.setattr(webhooks, "tls_context", lambda: trusting)
        other_name = send(channel=webhook(receiver.url), notification=notification)
        assert receiver.requests == []
    assert not other_name.ok
    assert other_name.error.startswith("SSLCertVerificationError")


def test_each_message_has_a_connection_of_its_own_whatever_the_answer() -> None:
    notifications = [notification_of(held_call())] * 3
    with http_receiver() as receiver:
        with webhooks.webhook_sender(webhook(receiver.url)) as post:
            short = [post(notification) for notification in notifications]
            receiver.body = b"x" * (ANSWER_LIMIT + 1)
            receiver.answer = lambda _: (200, {})
            long = [post(notification) for notification in notifications]
            receiver.body = b""
            receiver.answer = lambda _: (204, {"connection": "close"})
            closing = [post(notification) for notification in notifications]
        got = receiver.wait_for(9)
    assert short + closing == [SendResult(ok=True, status_code=204)] * 6
    assert long == [SendResult(ok=True, status_code=200)] * 3
    # Nothing a receiver sends after one answer can be read as the next message's.
    assert len({g.client_port for g in got}) == 9


NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
# Past the 100 KiB of an unfinished head that httpcore lets h11 hold before it gives up.
HEAD_BEYOND_LIMIT = 100 * 1024


def test_interim_answers_are_passed_over_and_each_answer_framed_as_it_says() -> None:
    answers: list[bytes | None] = [
        b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + NO_CONTENT,
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\n\r\nthe body ends with the connection",
        NO_CONTENT,
    ]
    notification = notification_of(held_call())
    with (
        raw_http_receiver(answers, closing=frozenset({3})) as receiver,
        webhooks.webhook_sender(webhook(receiver.url)) as post,
    ):
        results = [post(notification) for _ in answers]
    assert [(r.ok, r.status_code) for r in results] == [
        (True, 204),
        (True, 200),
        (True, 202),
        (True, 200),
        (True, 204),
    ]
    assert len(set(receiver.ports)) == len(answers)
    host, port = receiver.url.removeprefix("http://").removesuffix("/hook").split(":")
    assert receiver.heads[0][0] == "POST /hook HTTP/1.1"
    assert f"host: {host}:{port}" in [line.lower() for line in receiver.heads[0]]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (None, "RemoteProtocolError: Server disconnected"),
        (
            b"HTTP/1.1 200 OK\r\nx-filler: " + b"y" * HEAD_BEYOND_LIMIT,
            f"RemoteProtocolError: {BAD_ANSWER}",
        ),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", f"RemoteProtocolError: {BAD_ANSWER}"),
    ],
    ids=["closed-unanswered", "endless-headers", "not-http"],
)
def test_an_answer_that_cannot_be_read_fails_the_attempt_and_the_connection(
    answer: bytes | None, error: str
) -> None:
    notification = notification_of(held_call())
    with (
        raw_http_receiver([answer, NO_CONTENT]) as receiver,
        webhooks.webhook_sender(webhook(receiver.url)) as post,
    ):
        failed, next_one = post(notification), post(notification)
    assert (failed.ok, failed.status_code) == (False, None)
    assert failed.error.startswith(error)
    assert "SSH" not in failed.error
    assert "yyyy" not in failed.error  # nothing the receiver sent is repeated
    assert next_one == SendResult(ok=True, status_code=204)
    assert receiver.ports[0] != receiver.ports[1]  # a new connection after the failure


def test_more_than_the_answer_ends_the_connection() -> None:
    notification = notification_of(held_call())
    with (
        raw_http_receiver([NO_CONTENT + NO_CONTENT, NO_CONTENT]) as receiver,
        webhooks.webhook_sender(webhook(receiver.url)) as post,
    ):
        results = [post(notification), post(notification)]
    assert results == [SendResult(ok=True, status_code=204)] * 2
    assert receiver.ports[0] != receiver.ports[1]


@dataclass
class DribblingReceiver:
    url: str
    ports: list[int] = field(default_factory=list)  # each request's sender port


@contextmanager
def dribbling_receiver(answer: bytes, *, pause: float) -> Iterator[DribblingReceiver]:
    """A receiver on 127.0.0.1 that writes ``answer`` to its first request a byte every
    ``pause`` seconds, each byte well within a socket timeout, and answers later requests
    (on other connections) at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    receiver = DribblingReceiver(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
    stop = threading.Event()

    def serve(conn: socket.socket, port: int) -> None:
        with conn, conn.makefile("rb") as reader:
            while lines := list(iter(lambda: reader.readline().rstrip(b"\r\n"), b"")):
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in lines
                    if line.lower().startswith(b"content-length:")
                )
                reader.read(length)
                first = not receiver.ports
                receiver.ports.append(port)
                try:
                    if not first:
                        conn.sendall(NO_CONTENT)
                        continue
                    for byte in answer:
                        conn.sendall(bytes([byte]))
                        if stop.wait(pause):
                            return
                except OSError:  # the sender gave up and closed the connection
                    return

    serve_each_connection(listener, serve)
    try:
        yield receiver
    finally:
        stop.set()
        listener.close()


DRIBBLED_HEAD = b"HTTP/1.1 204 No Content\r\nx-slow: " + b"y" * 100 + b"\r\n\r\n"
DRIBBLED_BODY = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"y" * 100


@pytest.mark.parametrize("answer", [DRIBBLED_HEAD, DRIBBLED_BODY], ids=["head", "body"])
def test_a_receiver_that_answers_a_byte_at_a_time_is_cut_off_at_the_timeout(
    settings: Any, answer: bytes
) -> None:
    """The timeout bounds the whole attempt, not each read: a receiver that keeps every
    read short of it still cannot hold the sending thread past it."""
    settings.COUNTERSIGN_NOTIFY_TIMEOUT = 1
    notification = notification_of(held_call())
    with (
        dribbling_receiver(answer, pause=0.1) as receiver,
        webhooks.webhook_sender(webhook(receiver.url)) as post,
    ):
        began = time.monotonic()
        slow = post(notification)
        took = time.monotonic() - began
        next_one = post(notification)
    assert slow == SendResult(ok=False, error="TimeoutError: " + TIMED_OUT.format(seconds=1))
    assert 1 <= took < 3  # the whole answer would take over 10 s
    assert next_one == SendResult(ok=True, status_code=204)
    assert receiver.ports[0] != receiver.ports[1]  # a new connection after the cut


def test_send_never_raises() -> None:
    call = held_call()
    notification = notification_of(call)
    notification.call_id = uuid.uuid4()  # a call that is not there
    result = send(channel=channel(Kind.EMAIL, "ops@example.test"), notification=notification)
    assert not result.ok
    assert result.error.startswith("DoesNotExist")


# --- Email --------------------------------------------------------------------------------


@pytest.fixture
def smtp(settings: Any) -> Any:
    with smtp_receiver() as receiver:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = receiver.host, receiver.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        settings.DEFAULT_FROM_EMAIL = "countersign@example.test"
        yield receiver


def parts(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None
    assert html is not None
    return text.get_content(), html.get_content()


def approvers_world(call: Call) -> dict[str, User]:
    finance = Group.objects.create(name="finance")
    gate_make(name="finance", group=finance)
    people = {
        "alice": user_make(username="alice", groups=[finance]),
        "bob": user_make(username="bob", groups=[finance]),
        "dave": user_make(username="dave"),  # not in the gate's group
        "erin": user_make(username="erin", groups=[finance]),  # inactive below
        "frank": user_make(username="frank", groups=[finance]),  # no address below
        "carol": user_make(username="carol", groups=[finance]),  # the call's principal
        "vic": user_make(username="vic", decide=False, view=True, groups=[finance]),
        "root": user_make(username="root", superuser=True),
    }
    for name, person in people.items():
        person.email = "" if name == "frank" else f"{name}@example.test"
        person.is_active = name != "erin"
        person.save()
    return people


def test_mail_goes_to_the_eligible_approvers_with_both_parts(smtp: Any) -> None:
    call = held_call()
    people = approvers_world(call)
    result = send(channel=channel(Kind.EMAIL, "approvers"), notification=notification_of(call))
    assert result.ok, result
    # One mail each, so approvers do not see each other's addresses.
    assert sorted(to for _, tos, _ in smtp.messages for to in tos) == [
        "alice@example.test",
        "bob@example.test",
        "root@example.test",
    ]
    assert all(len(tos) == 1 for _, tos, _ in smtp.messages)
    # The same set as the deciders' rule, person by person.
    may = {
        person.email
        for person in people.values()
        if person.email
        and person.is_active
        and call.pk in decidable_call_ids(user=person, calls=[call])
    }
    assert set(approver_addresses(call)) == may
    sender, _, message = smtp.messages[0]
    assert sender == "countersign@example.test"
    # The agent's words in quotes (test_literal_text.py); the encoded subject is read back
    # with a leading space.
    assert message["subject"].strip() == (
        "[Countersign] Waiting for approval: \u201cpay\u201d USD 1,250.00 for \u201ccarol\u201d"
    )
    text, html = parts(message)
    page = f"{PUBLIC}/calls/{call.pk}/"
    for part in (text, html):
        assert "USD 1,250.00" in part
        assert "payments-bot" in part  # the agent
        assert "carol" in part  # the principal
        assert "run-7" in part
        assert "USD 1,250.00 is over the limit of USD 500.00 per call (rule big)" in part
        assert re.search(r"(59|60)m \d\ds|1h 00m", part)  # time left of the hour's hold
        assert page in part
    assert '<strong class="amount">USD 1,250.00</strong>' in html
    # The one link is the call page, and opening it decides nothing.
    assert set(URL_IN_TEXT.findall(text)) == {page}
    assert set(re.findall(r'href="([^"]+)"', html)) == {page}
    client = Client()
    client.force_login(people["alice"])
    assert client.get(f"/calls/{call.pk}/").status_code == 200
    call.refresh_from_db()
    assert call.status == Call.Status.PENDING


def test_a_decision_mail_says_who_decided(smtp: Any) -> None:
    call = held_call()
    Call.objects.filter(pk=call.pk).update(
        status=Call.Status.APPROVED, decided_by=user_make(username="bob"), decision_comment="ok"
    )
    call.refresh_from_db()
    result = send(
        channel=channel(Kind.EMAIL, "ops@example.test, audit@example.test"),
        notification=notification_of(call, Event.DECIDED),
    )
    assert result.ok
    assert sorted(to for _, tos, _ in smtp.messages for to in tos) == [
        "audit@example.test",
        "ops@example.test",
    ]
    message = smtp.messages[0][2]
    assert message["subject"].strip() == (
        "[Countersign] Approved by bob: \u201cpay\u201d USD 1,250.00 for \u201ccarol\u201d"
    )
    text, _ = parts(message)
    assert "Decided by: bob" in text
    assert "Comment:    \u201cok\u201d" in text
    assert "Time left" not in text


def test_mail_without_anyone_to_send_to(smtp: Any) -> None:
    notification = notification_of(held_call())
    nobody = send(channel=channel(Kind.EMAIL, "approvers"), notification=notification)
    assert nobody == SendResult(ok=True, error=NO_APPROVER_ADDRESS)
    bad = send(
        channel=channel(Kind.EMAIL, "ops@example.test, not-an-address"), notification=notification
    )
    assert bad == SendResult(ok=False, error=BAD_ADDRESS.format(address="not-an-address"))
    assert smtp.messages == []


def test_a_mail_server_that_is_down_is_a_failed_attempt(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "mailer", "M4ilPassw0rd"
    result = send(
        channel=channel(Kind.EMAIL, "ops@example.test"), notification=notification_of(held_call())
    )
    assert not result.ok
    assert result.error.startswith("ConnectionRefusedError")
    assert "M4ilPassw0rd" not in result.error


# --- Apprise ------------------------------------------------------------------------------


def test_apprise_sends_a_short_message_with_the_facts_and_the_link() -> None:
    call = held_call()
    with http_receiver() as receiver:
        receiver.answer = lambda _: (200, {})
        target = receiver.url.replace("http://", "json://") + "/chat"
        result = send(channel=channel(Kind.APPRISE, target), notification=notification_of(call))
        [got] = receiver.wait_for(1)
    assert result == SendResult(ok=True)
    assert got.path == "/chat"
    message = json.loads(got.body)
    assert message["title"] == (
        "Waiting for approval: \u201cpay\u201d USD 1,250.00 for \u201ccarol\u201d"
    )
    body = message["message"]
    assert "USD 1,250.00" in body
    assert "payments-bot" in body
    assert "carol" in body
    assert "left" in body
    assert f"{PUBLIC}/calls/{call.pk}/" in body
    assert message["type"] == "warning"


def test_an_apprise_failure_is_a_failed_attempt_with_a_short_error() -> None:
    notification = notification_of(held_call())
    with http_receiver() as receiver:
        receiver.answer = lambda _: (500, {})
        target = receiver.url.replace("http://", "json://apiuser:Ch4tS3cret@") + "/chat"
        result = send(channel=channel(Kind.APPRISE, target), notification=notification)
        assert len(receiver.requests) == 1
    assert not result.ok
    assert result.error.startswith("the JSON service did not take the message")
    assert len(result.error) <= 200
    assert "Ch4tS3cret" not in result.error
    assert "apiuser" not in result.error
    unknown = send(channel=channel(Kind.APPRISE, "nosuchscheme://x"), notification=notification)
    assert unknown == SendResult(ok=False, error=NOT_APPRISE)


def test_an_expiring_notice_says_the_time_left() -> None:
    call = held_call()
    Call.objects.filter(pk=call.pk).update(expires_at=timezone.now() + timedelta(seconds=250))
    call.refresh_from_db()
    with http_receiver() as receiver:
        receiver.answer = lambda _: (200, {})
        target = receiver.url.replace("http://", "json://")
        assert send(
            channel=channel(Kind.APPRISE, target),
            notification=notification_of(call, Event.EXPIRING),
        ).ok
        [got] = receiver.wait_for(1)
    message = json.loads(got.body)
    assert message["title"].startswith("Expiring soon: \u201cpay\u201d")
    assert re.search(r"4m \d\ds left", message["message"])
