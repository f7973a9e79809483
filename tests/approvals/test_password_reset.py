"""Password reset requests (approvals/accounts/password_reset.py and throttle.py): the mail's
link starts with ``COUNTERSIGN_PUBLIC_URL`` whatever the request's Host says, and works;
requests are throttled per email address and per client address; and every request gets the
same answer, whether the address has an account, was throttled, or no count could be read."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.test.utils import override_settings

from approvals.accounts import throttle
from tests.factories import user_make

pytestmark = pytest.mark.django_db

RESET = "/accounts/password_reset/"
DONE = "/accounts/password_reset/done/"
PUBLIC_URL = "https://countersign.example.test"
ANN = "ann@example.com"
NEW_PASSWORD = "a long and new passphrase 7"
CLIENT_A, CLIENT_B, CLIENT_C = "192.0.2.10", "192.0.2.11", "192.0.2.12"  # TEST-NET-1
REDIS_DB = "redis://127.0.0.1:6379/8"  # this suite's own Redis database
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1
LINK = re.compile(r"^(\S+/reset/\S+/)$", re.MULTILINE)


def _forget_redis_counts(url: str) -> None:
    connection = redis.Redis.from_url(url, socket_connect_timeout=1)
    for key in connection.scan_iter(f"countersign:rate:{throttle.RESET_KEY}*"):
        connection.delete(key)


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test counts from zero: a process's counts outlive a test otherwise, and so do
    Redis's when the suite runs with ``REDIS_URL``."""
    monkeypatch.setattr(throttle, "_reset_limiters", {})
    if settings.REDIS_URL:
        _forget_redis_counts(settings.REDIS_URL)
    yield
    if settings.REDIS_URL:
        _forget_redis_counts(settings.REDIS_URL)


@pytest.fixture
def ann() -> User:
    user = user_make(username="ann")
    user.email = ANN
    user.save()
    return user


def _ask(client: Client, email: str, *, host: str = "127.0.0.1", remote: str = CLIENT_A) -> str:
    """Ask for a reset; the answer as a person sees it: where it sends them and that page."""
    answer = client.post(RESET, {"email": email}, HTTP_HOST=host, REMOTE_ADDR=remote)
    assert answer.status_code == 302, answer.status_code
    page = client.get(answer["Location"], HTTP_HOST=host, REMOTE_ADDR=remote)
    assert page.status_code == 200
    return f"{answer['Location']}\n{page.content.decode()}"


@override_settings(
    COUNTERSIGN_PUBLIC_URL=PUBLIC_URL, ALLOWED_HOSTS=["127.0.0.1", "evil.example", "testserver"]
)
@pytest.mark.parametrize("host", ["evil.example:8443", "127.0.0.1:8443"])
def test_the_mails_link_starts_with_the_public_url_whatever_the_host(
    client: Client, ann: User, host: str
) -> None:
    _ask(client, ANN, host=host)
    [message] = mail.outbox
    assert message.to == [ANN]
    body, subject = str(message.body), str(message.subject)
    [link] = LINK.findall(body)
    assert link.startswith(f"{PUBLIC_URL}/accounts/reset/")
    assert host not in body + subject
    assert ":8443" not in body + subject
    # The link works: it leads to the form that sets a new password.
    path = link.removeprefix(PUBLIC_URL)
    form = client.get(path, follow=True)
    assert form.status_code == 200
    done = client.post(
        form.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert done.status_code == 302
    ann.refresh_from_db()
    assert ann.check_password(NEW_PASSWORD)


@override_settings(COUNTERSIGN_PASSWORD_RESET_RATE=(2, 3600))
def test_an_address_gets_its_share_of_mails_from_any_number_of_clients(
    client: Client, ann: User
) -> None:
    answers = [_ask(client, ANN, remote=remote) for remote in (CLIENT_A, CLIENT_B, CLIENT_C)]
    assert len(mail.outbox) == 2
    assert answers[2] == answers[0]


@override_settings(COUNTERSIGN_PASSWORD_RESET_RATE=(2, 3600))
def test_a_client_gets_its_share_of_requests_whatever_the_addresses(client: Client) -> None:
    people = [user_make(username=f"p{n}") for n in range(3)]
    for person in people:
        person.email = f"{person.username}@example.com"
        person.save()
    answers = [_ask(client, person.email, remote=CLIENT_A) for person in people]
    assert [message.to for message in mail.outbox] == [["p0@example.com"], ["p1@example.com"]]
    assert answers[2] == answers[0]
    # Another client is not held back by the first one's requests.
    _ask(client, "p2@example.com", remote=CLIENT_B)
    assert mail.outbox[-1].to == ["p2@example.com"]


@override_settings(COUNTERSIGN_PASSWORD_RESET_RATE=(1, 3600))
def test_the_answer_is_the_same_for_an_account_none_and_a_throttled_request(
    client: Client, ann: User
) -> None:
    sent = _ask(client, ANN, remote=CLIENT_A)
    nobody = _ask(client, "nobody@example.com", remote=CLIENT_B)
    throttled = _ask(client, ANN, remote=CLIENT_C)
    assert len(mail.outbox) == 1
    assert sent.startswith(DONE)
    assert sent == nobody == throttled


@override_settings(REDIS_URL=UNREACHABLE_REDIS)
def test_no_mail_goes_out_when_the_counts_cannot_be_read(client: Client, ann: User) -> None:
    answer = _ask(client, ANN)
    assert mail.outbox == []
    assert answer.startswith(DONE)


@pytest.fixture
def shared_redis() -> Iterator[str]:
    try:
        redis.Redis.from_url(REDIS_DB, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip(f"needs a Redis at {REDIS_DB}")
    _forget_redis_counts(REDIS_DB)
    yield REDIS_DB
    _forget_redis_counts(REDIS_DB)


def test_with_redis_the_counts_are_shared_by_every_worker(
    client: Client, ann: User, shared_redis: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(REDIS_URL=shared_redis, COUNTERSIGN_PASSWORD_RESET_RATE=(2, 3600)):
        _ask(client, ANN, remote=CLIENT_A)
        # A second worker: a process with counts of its own, but the same Redis.
        monkeypatch.setattr(throttle, "_reset_limiters", {})
        _ask(client, ANN, remote=CLIENT_B)
        _ask(client, ANN, remote=CLIENT_C)
    assert len(mail.outbox) == 2


def test_a_process_forgets_addresses_once_their_window_has_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Anyone may send a new address each time: a process's counts must not keep them all."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    limiter = throttle._ForgettingLimiter(1, 60)
    for n in range(100):
        assert limiter.hit(f"address {n}") is None
    assert limiter.hit("address 0") is not None  # counted within its window
    clock[0] += 60 + throttle.FORGET_EVERY_SECONDS
    assert limiter.hit("a new one") is None
    assert set(limiter._log) == {"a new one"}
    assert limiter.hit("address 0") is None  # its window has passed
