"""Approvers' sessions: a login lasts until its session expires, and a session key the client
chose is never adopted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from tests.factories import PASSWORD, user_make

pytestmark = pytest.mark.django_db


def test_a_signed_in_approver_stays_signed_in_and_is_signed_out_when_the_session_expires(
    client: Client,
) -> None:
    user_make(username="ann", view=True)
    assert client.login(username="ann", password=PASSWORD)
    assert client.get("/").status_code == 200
    Session.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    answer = client.get("/")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/")


def test_a_session_key_the_client_chose_is_never_saved(client: Client) -> None:
    user_make(username="ann", view=True)
    chosen = "x" * 32
    client.cookies[settings.SESSION_COOKIE_NAME] = chosen
    answer = client.post("/accounts/login/", {"username": "ann", "password": PASSWORD})
    assert answer.status_code == 302
    assert client.cookies[settings.SESSION_COOKIE_NAME].value != chosen
    assert not Session.objects.filter(pk=chosen).exists()
    assert client.get("/").status_code == 200
