"""Webhooks through a real forward proxy (proxy.py, in a process of its own): an https target
is tunnelled with CONNECT and its certificate checked against the target, a plain one is sent
to the proxy whole, NO_PROXY hosts are reached directly, and a proxy that cannot be passed is
a failed attempt, never a request sent around it."""

from __future__ import annotations

import base64
import ssl
from typing import Any

import pytest

from config.env import OutboundProxies, parse_proxy_url
from notifications.senders import SendResult, send
from notifications.senders import webhook as webhooks
from tests.live import free_port
from tests.notifications.test_senders import (
    assert_refused_for_another_name,
    held_call,
    notification_of,
    verified,
    webhook,
)
from tests.receivers import forward_proxy, http_receiver, raw_http_receiver, self_signed

pytestmark = pytest.mark.django_db


def through(settings: Any, *, http: str = "", https: str = "", no: str = "") -> None:
    settings.COUNTERSIGN_WEBHOOK_PROXIES = OutboundProxies(
        http=parse_proxy_url(http, name="HTTP_PROXY") if http else None,
        https=parse_proxy_url(https, name="HTTPS_PROXY") if https else None,
        no_proxy=tuple(no.split(",")) if no else (),
    )


def test_an_https_webhook_is_tunnelled_and_its_certificate_checked_against_the_target(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    notification = notification_of(held_call())
    ours = self_signed(ip="127.0.0.1")
    with forward_proxy() as proxy:
        through(settings, https=proxy.url)
        with http_receiver(tls=ours.server) as receiver:
            trusting = ssl.create_default_context(cadata=ours.pem)
            monkeypatch.setattr(webhooks, "tls_context", lambda: trusting)
            sent = send(channel=webhook(f"{receiver.url}/hooks"), notification=notification)
            [got] = receiver.wait_for(1)
        assert sent == SendResult(ok=True, status_code=204)
        assert got.path == "/hooks"
        assert verified(got)["data"]["call"]["id"] == str(notification.call_id)
        assert "proxy-authorization" not in got.headers
        port = receiver.url.rsplit(":", 1)[1]
        assert proxy.requests(1) == [f"CONNECT 127.0.0.1:{port}"]
        # The tunnel's far end is the target: a certificate for another name is refused.
        assert_refused_for_another_name(notification, monkeypatch)


@pytest.mark.xfail(
    strict=True,
    reason="httpcore 1.0 writes an IPv6 address bare in CONNECT (CONNECT ::1:8443): "
    "docs/notifications.md, 'Through a proxy'",
)
def test_an_https_webhook_to_an_ipv6_address_asks_the_proxy_for_it_in_brackets(
    settings: Any,
) -> None:
    """``CONNECT`` names an IPv6 address as an authority does, in brackets, so that the port
    can be told from the address. The proxy here records the request as written and refuses
    it (proxy.py logs either form the same, and cannot reach an IPv6 address itself); the
    TLS to such an address, the same through a tunnel as directly, is checked in
    test_senders.py."""
    notification = notification_of(held_call())
    refusal = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n"
    with raw_http_receiver([refusal]) as proxy:
        through(settings, https=proxy.url.removesuffix("/hook"))
        sent = send(channel=webhook("https://[::1]:8443/hooks"), notification=notification)
    [head] = proxy.heads
    assert head[0] == "CONNECT [::1]:8443 HTTP/1.1"
    assert "host: [::1]:8443" in [line.lower() for line in head]
    assert sent == SendResult(ok=False, error="ProxyError: 403 Forbidden")


def test_a_plain_webhook_goes_to_the_proxy_whole_with_the_proxy_credentials(
    settings: Any,
) -> None:
    notification = notification_of(held_call())
    with forward_proxy(basic_auth="relay:s3cret") as proxy, http_receiver() as receiver:
        through(settings, http=proxy.url.replace("://", "://relay:s3cret@"))
        # The target's own user and password go in its Authorization header, not the URL.
        target = receiver.url.replace("://", "://hook:pw@") + "/in?x=1"
        sent = send(channel=webhook(target), notification=notification)
        [got] = receiver.wait_for(1)
        assert proxy.requests(1) == [f"POST {receiver.url.removeprefix('http://')}/in?x=1"]
    assert sent == SendResult(ok=True, status_code=204)
    assert got.path == "/in?x=1"
    assert got.headers["authorization"] == "Basic " + base64.b64encode(b"hook:pw").decode()
    assert verified(got)["type"] == "call.held"


@pytest.mark.parametrize("tls", [False, True])
def test_wrong_proxy_credentials_fail_the_attempt_without_naming_them(
    settings: Any, monkeypatch: pytest.MonkeyPatch, tls: bool
) -> None:
    notification = notification_of(held_call())
    certificate = self_signed(ip="127.0.0.1")
    monkeypatch.setattr(
        webhooks, "tls_context", lambda: ssl.create_default_context(cadata=certificate.pem)
    )
    with forward_proxy(basic_auth="relay:s3cret") as proxy:
        wrong = proxy.url.replace("://", "://relay:hunter2@")
        through(settings, http=wrong, https=wrong)
        with http_receiver(tls=certificate.server if tls else None) as receiver:
            failed = send(channel=webhook(receiver.url), notification=notification)
            assert receiver.requests == []
    assert not failed.ok
    assert "407" in failed.error
    assert "hunter2" not in failed.error


def test_no_proxy_hosts_are_reached_directly_and_no_other_host_is(
    settings: Any,
) -> None:
    notification = notification_of(held_call())
    nowhere = f"http://127.0.0.1:{free_port()}"  # a proxy that is not running
    with http_receiver() as receiver:
        through(settings, http=nowhere, https=nowhere, no="localhost,127.0.0.1")
        direct = send(channel=webhook(receiver.url), notification=notification)
        through(settings, http=nowhere, no="localhost")
        stopped = send(channel=webhook(receiver.url), notification=notification)
        # Only the target's own scheme's proxy counts: an http target ignores HTTPS_PROXY.
        through(settings, https=nowhere)
        other_scheme = send(channel=webhook(receiver.url), notification=notification)
        got = receiver.wait_for(2)
    assert direct == other_scheme == SendResult(ok=True, status_code=204)
    assert not stopped.ok
    assert stopped.error.startswith("ConnectionRefusedError")
    assert len(got) == 2
