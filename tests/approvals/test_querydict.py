"""One reading of "a query parameter given more than once", whichever surface asks
(approvals.querydict); each surface words the refusal its own way."""

from __future__ import annotations

import json

import pytest
from django.http import QueryDict
from django.test import Client

from approvals.api.errors import QUERY_REPEATED
from approvals.querydict import ParameterRepeated, query_value, query_values, scope_query
from approvals.realtime.consumers import parse_since
from tests.factories import agent_with_token, user_make


def test_each_parameter_asked_for_has_one_value_or_is_absent() -> None:
    query = QueryDict("a=1&b=&c=%2B+x&other=1&other=2")
    assert query_values(query, ["a", "b", "c", "missing"]) == {"a": "1", "b": "", "c": "+ x"}
    assert query_value(query, "missing") is None


def test_every_parameter_given_twice_is_named_in_the_order_asked() -> None:
    query = QueryDict("b=1&a=1&b=2&a=2&c=3")
    with pytest.raises(ParameterRepeated) as repeated:
        query_values(query, ["a", "b", "c"])
    assert repeated.value.names == ("a", "b")


def test_a_scopes_query_string_reads_as_djangos_request_does() -> None:
    text = "a=1&a=&b=%2B+x&c&d=%C3%A9"
    assert dict(scope_query(text.encode("latin-1")).lists()) == dict(QueryDict(text).lists())


def test_a_scopes_query_string_may_have_more_parameters_than_a_request() -> None:
    text = "&".join(f"p{n}=1" for n in range(1001)) + "&since=2026-01-01T00:00:00Z"
    assert query_value(scope_query(text.encode("latin-1")), "since") == "2026-01-01T00:00:00Z"


def test_the_agent_sockets_since_refuses_it_twice() -> None:
    with pytest.raises(ValueError, match="since is given more than once"):
        parse_since(b"since=2026-01-01&since=2026-01-02")


@pytest.mark.django_db
def test_the_agent_api_names_the_parameter_given_twice() -> None:
    _, token = agent_with_token()
    agent = Client(headers={"Authorization": f"Bearer {token}"})
    response = agent.get("/api/v1/calls?status=pending&status=denied")
    assert response.status_code == 400
    assert json.loads(response.content)["error"]["message"] == QUERY_REPEATED.format(name="status")


@pytest.mark.django_db
def test_a_page_names_each_parameter_given_twice() -> None:
    browser = Client()
    browser.force_login(user_make(username="alice"))
    response = browser.get("/history/?agent=a&status=x&agent=b&status=y")
    assert response.status_code == 400
    page = response.content.decode()
    assert QUERY_REPEATED.format(name="agent") in page
    assert QUERY_REPEATED.format(name="status") in page
