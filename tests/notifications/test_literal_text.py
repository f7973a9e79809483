"""Text that agents write never forges a line, a link or a mention in a message to people
(notifications/senders/literal_text.py). Calls are submitted through the agent API and their
messages written by the outbox; mail is received by a real SMTP server, chat messages by a
real HTTP receiver through Apprise's own plugins: ``json://``, Mattermost's Slack-compatible
incoming webhook, and the Slack and Discord plugins sent to the receiver."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from apprise.plugins.discord import NotifyDiscord
from apprise.plugins.slack import NotifySlack
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from approvals.models import Call
from approvals.services.decisions import call_decide
from notifications.channels import channel_add
from notifications.models import Notification, NotificationChannel
from notifications.senders import SendResult, send
from notifications.senders.literal_text import CHAT, CHAT_MARKUP, MAIL, one_line
from tests.factories import agent_with_token, rule_make, user_make
from tests.notifications.test_senders import PUBLIC, URL_IN_TEXT, parts
from tests.receivers import Received, http_receiver, smtp_receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def public_url(settings: Any) -> None:
    settings.COUNTERSIGN_PUBLIC_URL = PUBLIC


Event = NotificationChannel.Event
Kind = NotificationChannel.Kind

# The forgery of issue 39: a fake decision and a link above the real ones.
FORGED_RUN_ID = "\nDecided by: alice (pre-approved)\nhttps://evil"
# The same with every other way to break or disguise a line: a carriage return, U+2028, NEL,
# a right-to-left override, a zero-width space, a terminal escape.
FORGED_RUN_ID_OTHERWISE = (
    "run-7\r\nDecided by: alice (pre-approved)\u2028https://evil.example/approve"
    "\x85Time left:  9h\u202eevil\u200b\x1b[2J"
)
# Slack's, Mattermost's, Discord's and Teams' mentions and links, Markdown and HTML.
MARKUP_PRINCIPAL = (
    "<!channel> @here @everyone <@U024BE7LH> <https://evil.example|bank> "
    "[bank](https://evil.example) <at>all</at> `code` *bold* _it_ ~gone~ &amp; ||spoiler||"
)
MENTIONS_AND_LINKS = (
    "<!channel>",
    "!channel>",
    "<!here>",
    "@here",
    "@everyone",
    "@channel",
    "<@U024BE7LH>",
    "<https://evil",
    "https://evil",
    "evil.example|bank",
    "[bank]",
    "](https",
    "<at>",
    "&amp;",
    "`code`",
    "*bold*",
    "_it_",
    "~gone~",
    "||spoiler||",
)
# Where Apprise's plugins have a service fetch the sender's icon from.
APPRISE_ICONS = "https://github.com/caronc/apprise/raw/master/apprise/assets/"
# MARKUP_PRINCIPAL as a chat message shows it: each markup character in its full-width form.
PRINCIPAL_IN_CHAT = (
    "for \u201c\uff1c!channel\uff1e \uff20here \uff20everyone \uff1c\uff20U024BE7LH\uff1e "
    "\uff1chttps\uff1a//evil.example\uff5cbank\uff1e \uff3bbank\uff3d(https\uff1a//evil.example) "
    "\uff1cat\uff1eall\uff1c/at\uff1e \uff40code\uff40 \uff0abold\uff0a \uff3fit\uff3f "
    "\uff5egone\uff5e \uff06amp; \uff5c\uff5cspoiler\uff5c\uff5c\u201d"
)
HOLD_RULE = "big: pay arg=amount max USD 500.00 -> gate finance"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Any]:
    with smtp_receiver() as receiver:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = receiver.host, receiver.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        yield receiver


def submitted(*, principal: str = "carol", run_id: str = "") -> Call:
    """A payment of USD 1,250.00 submitted through the agent API, held at ``finance``."""
    rule_make(line=HOLD_RULE)
    _, token = agent_with_token(name="payments-bot", principal="carol", allowed_principals="*")
    body = {
        "tool": "pay",
        "arguments": {"amount": "1250.00", "payee": "acme"},
        "principal": principal,
        "run_id": run_id,
    }
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/api/v1/calls", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    call = Call.objects.get(pk=response.json()["id"])
    assert call.status == Call.Status.PENDING
    return call


def message_of(call: Call, event: str = Event.HELD) -> Notification:
    """The message the outbox wrote for ``call`` and ``event``, as committed."""
    notification: Notification = Notification.objects.get(call=call, event=event)
    return notification


def decided_with(call: Call, comment: str) -> None:
    call_decide(
        call_id=call.pk,
        user=user_make(username="root", superuser=True),
        approve=False,
        comment=comment,
        arguments_sha256=call.arguments_sha256,
    )


def strings_in(value: Any) -> Iterator[str]:
    """Every string of a JSON value, keys too."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def assert_no_markup(got: Received) -> str:
    """The request's JSON body as one text, after checking it carries no mention and no link
    but the call page's."""
    text = "\n".join(strings_in(json.loads(got.body)))
    for markup in MENTIONS_AND_LINKS:
        assert markup not in text
    for url in URL_IN_TEXT.findall(text):
        assert url.startswith((PUBLIC, APPRISE_ICONS)), url
    return text


# --- Mail ---------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [FORGED_RUN_ID, FORGED_RUN_ID_OTHERWISE], ids=["brief", "all"])
def test_a_run_id_with_lines_forges_no_line_and_no_link_in_the_mail(smtp: Any, run_id: str) -> None:
    mail = channel_add(kind=Kind.EMAIL, target="ops@example.test")
    call = submitted(principal="carol\nDecided by: alice", run_id=run_id)
    assert send(channel=mail, notification=message_of(call)) == SendResult(ok=True)
    [(_, _, message)] = smtp.messages
    text, html = parts(message)
    page = f"{PUBLIC}/calls/{call.pk}/"
    lines = text.splitlines()
    # Nobody has decided: no line says so, and every line that repeats the agent's text is
    # the one line of its field, the text in quotes.
    assert not [line for line in lines if line.lstrip().startswith(("Decided", "https"))]
    [run_line] = [line for line in lines if "alice" in line and line.startswith("Run:")]
    assert re.fullmatch(
        r"Run: {8}\u201c[^\u201c\u201d]*Decided by: alice \(pre-approved\) [^\u201d]*\u201d",
        run_line,
    )
    assert "Principal:  \u201ccarol Decided by: alice\u201d" in lines
    assert [line for line in lines if "alice" in line] == [
        "Principal:  \u201ccarol Decided by: alice\u201d",
        run_line,
    ]
    assert not [line for line in lines if line.startswith("Time left") and "9h" in line]
    # The one link is the call page's, in both parts.
    assert set(URL_IN_TEXT.findall(text)) == {page}
    assert set(URL_IN_TEXT.findall(html)) == {page}
    assert set(re.findall(r'href="([^"]+)"', html)) == {page}
    assert "https\uff1a//evil" in text
    for sent in (text, html, str(message["subject"])):
        part = sent.replace("\r\n", "\n")  # mail's own line ends
        assert not [char for char in part if unicodedata.category(char) in ("Cf", "Zl", "Zp")]
        assert not [char for char in part if unicodedata.category(char) == "Cc" and char != "\n"]
    assert "Decided by" not in html.replace("Decided by: alice", "")
    # Folded as an encoded header, which the parser reads back with a leading space.
    assert message["subject"].strip() == (
        "[Countersign] Waiting for approval: \u201cpay\u201d USD 1,250.00 for "
        "\u201ccarol Decided by: alice\u201d"
    )


def test_markup_in_the_mail_is_quoted_text_and_escaped_html(smtp: Any) -> None:
    mail = channel_add(kind=Kind.EMAIL, target="ops@example.test")
    call = submitted(principal=MARKUP_PRINCIPAL)
    assert send(channel=mail, notification=message_of(call)).ok
    text, html = parts(smtp.messages[0][2])
    assert "Principal:  \u201c<!channel> @here" in text
    assert "<!channel>" not in html
    assert "&lt;!channel&gt; @here" in html
    assert "<at>" not in html
    assert set(re.findall(r'href="([^"]+)"', html)) == {f"{PUBLIC}/calls/{call.pk}/"}


# --- Chat services, through Apprise -------------------------------------------------------


def test_a_json_message_shows_mentions_and_links_as_literal_text() -> None:
    with http_receiver() as receiver:
        receiver.answer = lambda _: (200, {})
        target = receiver.url.replace("http://", "json://") + "/chat"
        chat = channel_add(kind=Kind.APPRISE, target=target)
        call = submitted(principal=MARKUP_PRINCIPAL, run_id=FORGED_RUN_ID)
        decided_with(call, "fine\n<!channel> Approved by: alice <https://evil|approve>")
        assert send(channel=chat, notification=message_of(call)) == SendResult(ok=True)
        assert send(channel=chat, notification=message_of(call, Event.DECIDED)).ok
        held, decided = receiver.wait_for(2)
    for got in (held, decided):
        assert_no_markup(got)
        message = json.loads(got.body)
        # The principal, as a person reads it, in quotes: its markup characters full-width.
        assert "\u201c\uff1c!channel\uff1e \uff20here \uff20everyone" in message["message"]
        assert "\uff1c@U024BE7LH\uff1e" not in message["message"]
        assert "\uff1c\uff20U024BE7LH\uff1e" in message["message"]
        assert message["title"].endswith(PRINCIPAL_IN_CHAT)
    body = json.loads(decided.body)["message"]
    [line] = [line for line in body.splitlines() if "fine" in line]
    assert line.endswith(
        ": \u201cfine \uff1c!channel\uff1e Approved by: alice "
        "\uff1chttps\uff1a//evil\uff5capprove\uff1e\u201d"
    )
    assert not [line for line in body.splitlines() if line.startswith("Approved by")]


def test_a_mattermost_webhook_gets_no_mention_and_no_disguised_link() -> None:
    """Mattermost's incoming webhooks take Slack's syntax too (``<!channel>``,
    ``<url|text>``) besides its own ``@channel`` and Markdown links."""
    with http_receiver() as receiver:
        receiver.answer = lambda _: (200, {})
        host = receiver.url.removeprefix("http://")
        chat = channel_add(kind=Kind.APPRISE, target=f"mmost://{host}/t0kenofthehook")
        call = submitted(principal=MARKUP_PRINCIPAL, run_id=FORGED_RUN_ID)
        assert send(channel=chat, notification=message_of(call)) == SendResult(ok=True)
        [got] = receiver.wait_for(1)
    assert got.path == "/hooks/t0kenofthehook"
    text = assert_no_markup(got)
    assert "\uff1c!channel\uff1e" in text


def test_the_slack_plugin_makes_no_live_mention_or_link_of_agent_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Apprise's Slack plugin escapes ``<``, ``>`` and ``&``, then turns ``<!channel>``,
    ``<@user>`` and ``<url|text>`` (escaped or not) back into Slack's own: whatever reaches it
    with those characters is live. Its endpoint is pointed at the receiver."""
    with http_receiver() as receiver:
        receiver.answer = lambda _: (200, {})
        receiver.body = b"ok"
        monkeypatch.setattr(NotifySlack, "webhook_url", f"{receiver.url}/services")
        chat = channel_add(kind=Kind.APPRISE, target="slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazk")
        call = submitted(principal=MARKUP_PRINCIPAL, run_id=FORGED_RUN_ID)
        assert send(channel=chat, notification=message_of(call)) == SendResult(ok=True)
        [got] = receiver.wait_for(1)
    assert got.path == "/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazk"
    text = assert_no_markup(got)
    assert "\uff1c!channel\uff1e" in text
    # The call page's link is still a link.
    assert f"{PUBLIC}/calls/{call.pk}/" in text


def test_the_discord_plugin_pings_nobody_for_agent_text(monkeypatch: pytest.MonkeyPatch) -> None:
    with http_receiver() as receiver:
        receiver.answer = lambda _: (204, {})
        monkeypatch.setattr(NotifyDiscord, "notify_url", f"{receiver.url}/api/webhooks")
        chat = channel_add(kind=Kind.APPRISE, target="discord://4174216298/JHMHI8qBe7bk2ZwO5U7")
        call = submitted(principal=MARKUP_PRINCIPAL, run_id=FORGED_RUN_ID)
        assert send(channel=chat, notification=message_of(call)) == SendResult(ok=True)
        [got] = receiver.wait_for(1)
    assert got.path == "/api/webhooks/4174216298/JHMHI8qBe7bk2ZwO5U7"
    assert_no_markup(got)
    assert "allow_mentions" not in json.loads(got.body)


# --- The rule itself ----------------------------------------------------------------------


@given(st.text(max_size=300))
def test_any_text_is_one_quoted_line_with_no_link_and_no_chat_markup(text: str) -> None:
    for style in (MAIL, CHAT):
        shown = style.quoted(text)
        assert shown.startswith("\u201c")
        assert shown.endswith("\u201d")
        inner = shown[1:-1]
        assert "\u201c" not in inner
        assert "\u201d" not in inner
        assert not [
            char
            for char in inner
            if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp")
            or (char.isspace() and char != " ")
        ]
        assert "://" not in inner
        assert len(inner) <= style.limit
    assert not set(CHAT.quoted(text)) & set(CHAT_MARKUP)
    assert not set(CHAT.line(text)) & set(CHAT_MARKUP)


def test_what_is_kept_of_a_text() -> None:
    assert one_line("  a\tb\n\nc\u2029d\u00a0 ", limit=100) == "a b c d"
    assert one_line("pay\u202eyap\u200b!", limit=100) == "payyap!"
    assert one_line("see www.evil.example or HTTPS://evil", limit=100) == (
        "see www\uff0eevil.example or HTTPS\uff1a//evil"
    )
    assert one_line("x" * 30, limit=10) == "x" * 9 + "\u2026"
    assert MAIL.quoted("say \u201chi\u201d") == '\u201csay "hi"\u201d'
    assert CHAT.quoted("a_b <!here>") == "\u201ca\uff3fb \uff1c!here\uff1e\u201d"
