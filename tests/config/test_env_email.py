"""EMAIL_URL and Django's EMAIL_* variables, read by config/env.py: a malformed value is
refused at start-up, and the refusal never repeats the value (it may hold a password)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st

from config.env import (
    CONSOLE_BACKEND,
    DEFAULT_FROM_EMAIL,
    SMTP_BACKEND,
    EmailSettings,
    email_settings,
    parse_email_url,
)

EMAIL_VARIABLES = (
    "EMAIL_URL",
    "EMAIL_HOST",
    "EMAIL_PORT",
    "EMAIL_HOST_USER",
    "EMAIL_HOST_PASSWORD",
    "EMAIL_USE_TLS",
    "EMAIL_USE_SSL",
    "EMAIL_BACKEND",
    "DEFAULT_FROM_EMAIL",
)


@pytest.fixture(autouse=True)
def _no_email_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in EMAIL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "smtp://mailer:p%40ss%2Fw0rd@mail.example.com:587?tls=1",
            EmailSettings(
                SMTP_BACKEND,
                "mail.example.com",
                587,
                "mailer",
                "p@ss/w0rd",
                True,
                False,
                configured=True,
            ),
        ),
        (
            "smtp://relay.internal",
            EmailSettings(SMTP_BACKEND, "relay.internal", 25, configured=True),
        ),
        (
            "smtp://relay.internal?ssl=yes",
            EmailSettings(SMTP_BACKEND, "relay.internal", 465, use_ssl=True, configured=True),
        ),
        (
            "submission://u:p@smtp.example.com",
            EmailSettings(SMTP_BACKEND, "smtp.example.com", 587, "u", "p", True, configured=True),
        ),
        (
            "smtps://u:p@smtp.example.com:2465/?from=approvals@example.com",
            EmailSettings(
                SMTP_BACKEND,
                "smtp.example.com",
                2465,
                "u",
                "p",
                use_ssl=True,
                from_email="approvals@example.com",
                configured=True,
            ),
        ),
        (
            "submission://smtp.example.com?tls=0",
            EmailSettings(SMTP_BACKEND, "smtp.example.com", 587, configured=True),
        ),
        ("console://", EmailSettings(CONSOLE_BACKEND, configured=True)),
    ],
)
def test_email_urls(url: str, expected: EmailSettings) -> None:
    assert parse_email_url(url) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://mail.example.com", "must start with smtp://"),
        ("smtp://", "names no host"),
        ("smtp://u:s3cretpw@mail.example.com:99999", "valid port"),
        ("smtp://u:s3cretpw@mail.example.com?tls=1&ssl=1", "both tls"),
        ("smtp://u:s3cretpw@mail.example.com?tls=maybe", "tls must be one of"),
        ("smtp://u:s3cretpw@mail.example.com?timeout=3", "unknown option"),
        ("smtp://u:s3cretpw@mail.example.com?tls=1&tls=0", "repeats an option"),
        ("smtp://u:s3cretpw@mail.example.com/inbox", "path"),
        ("smtp://u:s3cretpw@mail.example.com?from=nobody", "must be an email address"),
        ("console://u:s3cretpw@host", "console:// takes no host"),
    ],
)
def test_malformed_email_urls_are_refused_without_the_password(url: str, problem: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=problem) as refused:
        parse_email_url(url)
    assert "s3cretpw" not in str(refused.value)


printable = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=30)
hosts = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z]{2,6}){0,2}", fullmatch=True)


@given(
    user=printable,
    password=printable,
    host=hosts,
    port=st.one_of(st.none(), st.integers(1, 65535)),
    tls=st.sampled_from(["", "?tls=1", "?ssl=1", "?tls=0"]),
)
def test_any_user_password_and_host_read_back(
    user: str, password: str, host: str, port: int | None, tls: str
) -> None:
    at = "" if port is None else f":{port}"
    url = f"smtp://{quote(user, safe='')}:{quote(password, safe='')}@{host}{at}{tls}"
    found = parse_email_url(url)
    assert (found.user, found.password, found.host) == (user, password, host)
    assert found.use_tls == (tls == "?tls=1")
    assert found.use_ssl == (tls == "?ssl=1")
    assert found.port == port or (
        port is None and found.port == {"?tls=1": 587, "?ssl=1": 465}.get(tls, 25)
    )


@given(st.text(max_size=80))
def test_any_text_is_read_or_refused(text: str) -> None:
    try:
        found = parse_email_url(text)
    except ImproperlyConfigured:
        return
    assert found.configured
    assert found.backend in (SMTP_BACKEND, CONSOLE_BACKEND)


def test_email_url_wins_over_email_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMAIL_HOST", "other.example.com")
    monkeypatch.setenv("EMAIL_URL", "smtp://relay.internal:2525")
    monkeypatch.setenv("DEFAULT_FROM_EMAIL", "approvals@example.com")
    found = email_settings(debug=False)
    assert (found.host, found.port, found.from_email) == (
        "relay.internal",
        2525,
        "approvals@example.com",
    )


def test_djangos_email_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMAIL_HOST", "mail.example.com")
    monkeypatch.setenv("EMAIL_PORT", "587")
    monkeypatch.setenv("EMAIL_HOST_USER", "mailer")
    monkeypatch.setenv("EMAIL_HOST_PASSWORD", "pw")
    monkeypatch.setenv("EMAIL_USE_TLS", "1")
    assert email_settings(debug=True) == EmailSettings(
        SMTP_BACKEND, "mail.example.com", 587, "mailer", "pw", True, False, configured=True
    )
    monkeypatch.setenv("EMAIL_USE_SSL", "1")
    with pytest.raises(ImproperlyConfigured, match="cannot both be on"):
        email_settings(debug=False)


def test_nothing_set_is_the_console_under_debug_and_localhost_otherwise() -> None:
    assert email_settings(debug=True) == EmailSettings(CONSOLE_BACKEND)
    assert email_settings(debug=False) == EmailSettings(SMTP_BACKEND)
    assert EmailSettings(SMTP_BACKEND).from_email == DEFAULT_FROM_EMAIL
