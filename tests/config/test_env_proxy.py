"""HTTP_PROXY, HTTPS_PROXY and NO_PROXY, read by config/env.py for webhooks: a proxy that
webhooks cannot go through is refused at start-up (never taken for no proxy), and the refusal
never repeats the value (it may hold a password)."""

from __future__ import annotations

import base64

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st

from config.env import OutboundProxies, Proxy, outbound_proxies, parse_proxy_url

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_no_variable_is_no_proxy() -> None:
    assert outbound_proxies() == OutboundProxies()


def test_each_scheme_has_its_own_proxy_and_lower_case_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://upper.example.test:3128")
    monkeypatch.setenv("https_proxy", "http://lower.example.test:8080")
    monkeypatch.setenv("HTTP_PROXY", "plain.example.test:3129")
    monkeypatch.setenv("NO_PROXY", "localhost,.internal.example.test")
    # ALL_PROXY is not read: webhooks take a proxy per scheme only.
    monkeypatch.setenv("ALL_PROXY", "socks5://elsewhere.example.test:1080")
    assert outbound_proxies() == OutboundProxies(
        http=Proxy("plain.example.test", 3129),
        https=Proxy("lower.example.test", 8080),
        no_proxy=("localhost", "internal.example.test"),
    )


def test_an_empty_lower_case_variable_switches_the_upper_case_one_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("https_proxy", "")
    assert outbound_proxies() == OutboundProxies()


def test_credentials_in_the_url_become_the_proxy_authorization() -> None:
    proxy = parse_proxy_url("http://hook%40user:pa%3Ass@proxy.example.test", name="HTTPS_PROXY")
    login = base64.b64encode(b"hook@user:pa:ss").decode()
    assert proxy == Proxy("proxy.example.test", 80, f"Basic {login}")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("socks5://user:hunter2@proxy.example.test:1080", "names a scheme other than http"),
        ("https://user:hunter2@proxy.example.test:3128", "names a scheme other than http"),
        ("http://user:hunter2@proxy.example.test:99999", "is not a URL with a host and port"),
        ("http://user:hunter2@[proxy.example.test:3128", "is not a URL with a host and port"),
        ("http://user:hunter2@:3128", "names no host"),
    ],
)
def test_a_proxy_webhooks_cannot_use_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, url: str, problem: str
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", url)
    with pytest.raises(ImproperlyConfigured) as refused:
        outbound_proxies()
    assert str(refused.value).startswith(f"HTTPS_PROXY {problem};")
    assert "hunter2" not in str(refused.value)


@given(st.text(max_size=60))
def test_any_value_is_a_proxy_or_a_refusal_that_does_not_repeat_it(url: str) -> None:
    try:
        proxy = parse_proxy_url(url, name="HTTP_PROXY")
    except ImproperlyConfigured as refused:
        message = str(refused)
        assert message.startswith("HTTP_PROXY ")
        if len(url) > 3:
            assert url not in message
    else:
        assert proxy.host
        assert 0 <= proxy.port <= 65535


NO_PROXY = (
    " localhost, .Internal.example.test,10.0.0.0/8 ,192.168.1.7,::1, hooks.example.test:8443,"
)


@pytest.mark.parametrize(
    ("host", "port", "direct"),
    [
        ("localhost", 443, True),
        ("LOCALHOST", 443, True),
        ("internal.example.test", 443, True),
        ("a.b.internal.example.test", 443, True),
        ("notinternal.example.test", 443, False),
        ("10.20.30.40", 443, True),
        ("11.0.0.1", 443, False),
        ("192.168.1.7", 443, True),
        ("192.168.1.8", 443, False),
        ("::1", 443, True),
        ("hooks.example.test", 8443, True),
        ("hooks.example.test", 443, False),
        ("example.test", 443, False),
    ],
)
def test_no_proxy_names_hosts_domains_addresses_networks_and_ports(
    monkeypatch: pytest.MonkeyPatch, host: str, port: int, direct: bool
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("NO_PROXY", NO_PROXY)
    proxy = outbound_proxies().proxy_for(https=True, host=host, port=port)
    assert proxy is None if direct else proxy == Proxy("proxy.example.test", 3128)


def test_a_star_in_no_proxy_reaches_every_host_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("no_proxy", "*")
    assert outbound_proxies().proxy_for(https=False, host="anything.test", port=80) is None
