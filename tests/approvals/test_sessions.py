"""The session store reads a session as Django's database store does: the same data, nothing
for a missing or expired session, whose key is then never saved."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_django import DjangoAssertNumQueries

from approvals.sessions import SessionStore
from tests.factories import PASSWORD, user_make

pytestmark = pytest.mark.django_db


def _saved(data: dict[str, object]) -> str:
    store = SessionStore()
    store.update(data)
    store.save()
    assert store.session_key is not None
    return store.session_key


def test_a_saved_session_loads_as_djangos_store_loads_it() -> None:
    key = _saved({"a": 1, "b": ["x", None], "c": "é"})
    assert (
        SessionStore(key).load()
        == DatabaseSessionStore(key).load()
        == {
            "a": 1,
            "b": ["x", None],
            "c": "é",
        }
    )


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4))
def test_any_data_round_trips(data: dict[str, object]) -> None:
    assert SessionStore(_saved(data)).load() == data


def test_an_expired_session_is_empty_and_saving_makes_a_new_key() -> None:
    key = _saved({"a": 1})
    Session.objects.filter(pk=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    store = SessionStore(key)
    assert store.load() == {}
    store["b"] = 2
    store.save()
    assert store.session_key not in (None, key)
    assert SessionStore(store.session_key).load() == {"b": 2}


def test_a_key_the_client_chose_is_never_saved() -> None:
    chosen = "x" * 32
    store = SessionStore(chosen)
    assert store.load() == {}
    store["a"] = 1
    store.save()
    assert store.session_key != chosen
    assert not Session.objects.filter(pk=chosen).exists()


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


def test_a_session_found_is_read_in_one_statement_of_its_data_alone(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    key = _saved({"a": 1})
    with django_assert_num_queries(1) as captured:
        SessionStore(key).load()
    assert captured.captured_queries[0]["sql"].startswith('SELECT "session_data" FROM')
