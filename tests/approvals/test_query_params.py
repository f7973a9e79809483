"""Every query parameter of every page and agent API route is checked: a malformed or
out-of-range value is a ``400`` naming the parameter, never the value, and never a ``500`` —
nor, with ``DEBUG``, Django's traceback page. Hypothesis sends each route arbitrary text and
bytes for each parameter it reads, repeated ones, and random others.

Through Django's test client, which raises what a view raises: a ``500`` fails the test with
its traceback. ``tests/scale/test_hostile_query.py`` sends the same against a real server.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from approvals.api import longpoll, routes
from approvals.api.errors import (
    BAD_QUERY,
    QUERY_CHOICES,
    QUERY_RANGE,
    QUERY_REPEATED,
    QUERY_TEXT,
    QUERY_TOO_MANY,
    ApiError,
)
from approvals.models import Call
from approvals.realtime import consumers
from approvals.web.forms import HISTORY_EXPECTED
from approvals.web.querystring import NEXT_EXPECTED, QUERY_NUL, REQUEST_MALFORMED, bad_parameter
from config.asgi import application
from tests.asgi import chunked_request, http_scope
from tests.factories import agent_with_token, call_make, payment, rule_make, user_make

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

TOKEN = "cs_query-params-0123456789abcdef"
SECRET = "zq-SECRET-<b>value</b>-7f3e"
HISTORY_PARAMETERS = (*HISTORY_EXPECTED, "page")
LIST_PARAMETERS = ("status", "run_id", "limit", "offset")
ADMIN_PARAMETERS = (
    *("q", "o", "p", "e", "all", "_popup", "_to_field", "_changelist_filters"),
    *("status__exact", "created_at__year", "created_at__month", "created_at__day"),
    *("at__year", "at__month", "mode__exact", "active__exact", "parses", "revoked_at__isempty"),
)
# Hypothesis's budget: the suite's time matters more than more examples of the same rules.
EXAMPLES = 40


# --- the world -----------------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    approver: Client
    anonymous: Client
    admin: Client
    agent: Client
    held: Call
    final: Call

    @property
    def pages(self) -> dict[str, tuple[str, ...]]:
        """Each approver's page and the parameters it reads."""
        return {
            "/": (),
            "/history/": HISTORY_PARAMETERS,
            f"/calls/{self.held.pk}/": (),
            f"/calls/{self.final.pk}/": (),
        }


@pytest.fixture
def world(db: None) -> World:
    agent, _ = agent_with_token(token=TOKEN)
    rule_make(line="big: pay arg=amount max USD 100.00 -> gate")
    held = call_make(agent=agent, arguments=payment("500.00"))
    final = call_make(agent=agent, arguments=payment("5.00"))
    assert (held.status, final.status) == (Call.Status.PENDING, Call.Status.ALLOWED)
    return World(
        approver=_logged_in(user_make(username="alice", view=True)),
        anonymous=Client(),
        admin=_logged_in(user_make(username="root", superuser=True)),
        agent=Client(headers={"Authorization": f"Bearer {TOKEN}"}),
        held=held,
        final=final,
    )


def _logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- query strings -------------------------------------------------------------------------

INTERESTING = [
    "",
    " ",
    "0",
    "-1",
    "1",
    "2",
    "1.5",
    "1e9",
    "+1",
    " 1 ",
    "1_0",
    "１",
    str(10**30),
    "9" * 5000,
    "9999-12-31",
    "9999-12-30",
    "0000-01-01",
    "0001-01-01",
    "2025-02-30",
    "2025-03-01",
    "12/31/2024",
    "yesterday",
    "\x00",
    "a\x00b",
    "\ufffd",
    "%",
    "%%",
    "x" * 201,
    "pending",
    "approved",
    "Approved",
    "pay",
    "carol",
    "<script>",
    SECRET,
]


def _wire(text: str) -> str:
    return quote(text, safe="")


# A value as it goes on the wire: any bytes, percent-encoded, so also invalid UTF-8.
hostile_values = st.one_of(
    st.sampled_from(INTERESTING).map(_wire),
    st.text(max_size=40).map(_wire),
    st.binary(max_size=24).map(lambda data: quote(data, safe="")),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.dates().map(lambda day: day.isoformat()),
)
plain_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
in_range_days = st.dates(max_value=date.max - timedelta(days=1)).map(lambda day: day.isoformat())
# Values each parameter takes, so that whole query strings are often good ones too.
GOOD_VALUES: dict[str, st.SearchStrategy[str]] = {
    "status": st.sampled_from(
        ["", *HISTORY_EXPECTED["status"].removeprefix("one of ").split(", ")]
    ),
    "agent": st.sampled_from(["", "1"]),
    "tool": plain_text.map(_wire),
    "principal": plain_text.map(_wire),
    "since": in_range_days,
    "until": st.just("9999-12-30"),
    "page": st.sampled_from(["", "1"]),
    "next": st.sampled_from(["/", "/history/", "https://elsewhere.example/", "//x"]).map(_wire),
    "run_id": plain_text.map(_wire),
    "limit": st.integers(min_value=1, max_value=100).map(str),
    "offset": st.integers(min_value=0, max_value=10**9).map(str),
    "timeout": st.integers(min_value=0, max_value=25).map(str),
    "q": plain_text.map(_wire),
    "p": st.sampled_from(["1", "0", "2"]),
}
extra_names = st.one_of(
    st.sampled_from(["x", "page2", "_", "%00", "next", "q", "format", "since", "timeout"]),
    st.text(min_size=1, max_size=12).map(_wire),
)


@st.composite
def query_strings(draw: st.DrawFn, names: tuple[str, ...]) -> tuple[str, list[str]]:
    """A query string over some of ``names`` (at most two of them hostile: any value, maybe
    given twice; the others good or absent) and random other names, and the values sent, as
    the server decodes them."""
    hostile = draw(st.sets(st.sampled_from(names), max_size=2)) if names else set()
    pairs: list[tuple[str, str]] = []
    for name in names:
        if name in hostile:
            pairs += [(name, draw(hostile_values)) for _ in range(draw(st.sampled_from([1, 2])))]
        elif name in GOOD_VALUES and draw(st.booleans()):
            pairs.append((name, draw(GOOD_VALUES[name])))
    pairs += draw(st.lists(st.tuples(extra_names, hostile_values), max_size=3))
    order = draw(st.permutations(range(len(pairs))))
    query = "&".join(f"{pairs[i][0]}={pairs[i][1]}" for i in order)
    return query, [unquote(value, errors="replace") for _, value in pairs]


def _vocabulary() -> str:
    """Every sentence a refusal may hold: a value found in one of them is not an echo."""
    expected = [
        *HISTORY_EXPECTED.values(),
        NEXT_EXPECTED,
        QUERY_CHOICES.format(choices=", ".join(Call.Status.values)),
        QUERY_TEXT.format(most=routes.MAX_RUN_ID),
        QUERY_RANGE.format(low=1, high=routes.MAX_LIMIT),
        QUERY_RANGE.format(low=0, high=routes.MAX_OFFSET),
    ]
    return " ".join([*expected, BAD_QUERY, QUERY_REPEATED, QUERY_NUL, REQUEST_MALFORMED])


VOCABULARY = _vocabulary()


def assert_not_echoed(body: str, values: list[str]) -> None:
    for value in values:
        shown = value.strip()
        if len(shown) < 6 or shown in VOCABULARY:
            continue  # short text turns up on any page by chance
        assert shown not in body
        assert html.escape(shown) not in body


def page_refusals(sent: tuple[str, ...]) -> list[str]:
    """What a page's 400 may say: a sentence naming one of the parameters it read."""
    return [
        *(f"The query parameter {name} is malformed" for name in sent),
        *(QUERY_REPEATED.format(name=name) for name in sent),
    ]


def assert_page_refusal(response: Response, names: tuple[str, ...], values: list[str]) -> None:
    body = response.content.decode()
    assert response["Content-Type"].startswith("text/html")
    assert "Bad request" in body
    assert any(sentence in body for sentence in page_refusals(names)), body
    assert_not_echoed(body, values)


def api_refusal(response: Response, names: tuple[str, ...], values: list[str]) -> str:
    body = json.loads(response.content)
    assert set(body) == {"error"}
    assert body["error"]["code"] == "bad_request"
    message = body["error"]["message"]
    assert isinstance(message, str)
    assert any(sentence in message for sentence in page_refusals(names)), message
    assert_not_echoed(message, values)
    return message


PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- the properties ------------------------------------------------------------------------


@PROPERTY
@given(data=st.data())
def test_an_approvers_pages_are_200_or_a_400_naming_the_parameter(
    world: World, data: st.DataObject
) -> None:
    # The history most often: the others read no parameter.
    path = data.draw(st.sampled_from(["/history/"] * 3 + sorted(world.pages)))
    names = world.pages[path]
    query, values = data.draw(query_strings(names))
    response = world.approver.get(f"{path}?{query}")
    event(f"{path if names else 'a page reading none'}: {response.status_code}")
    assert response.status_code in {200, 400}
    if response.status_code == 400:
        assert names, "a page that reads no parameter ignores them all"
        assert_page_refusal(response, names, values)


@PROPERTY
@given(data=st.data())
def test_the_login_and_a_page_logged_out_are_200_302_or_400(
    world: World, data: st.DataObject
) -> None:
    path = data.draw(st.sampled_from(["/accounts/login/", "/history/", "/", "/healthz"]))
    query, values = data.draw(query_strings(("next",)))
    response = world.anonymous.get(f"{path}?{query}")
    event(f"{path}: {response.status_code}")
    assert response.status_code in {200, 302, 400}
    if response.status_code == 400:
        body = response.content.decode()
        assert any(s in body for s in [*page_refusals(("next",)), QUERY_NUL]), body
        assert_not_echoed(body, values)


@settings(PROPERTY, max_examples=EXAMPLES // 2)
@given(data=st.data())
def test_the_admins_lists_are_never_a_server_error(world: World, data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(["call", "auditentry", "agent", "caprule", "agenttoken"]))
    query, values = data.draw(query_strings(ADMIN_PARAMETERS))
    response = world.admin.get(f"/admin/approvals/{model}/?{query}")
    event(str(response.status_code))
    assert response.status_code in {200, 302, 400}
    if response.status_code == 400:
        body = response.content.decode()
        assert "Bad request" in body
        assert any(s in body for s in [QUERY_NUL, REQUEST_MALFORMED, *page_refusals(("next",))])
        assert_not_echoed(body, values)


@PROPERTY
@given(data=st.data())
def test_the_agent_api_is_200_or_a_400_naming_the_parameter(
    world: World, data: st.DataObject
) -> None:
    routes = {
        "/api/v1/calls": LIST_PARAMETERS,
        f"/api/v1/calls/{world.held.pk}": (),
        "/api/v1/currencies": (),
    }
    path = data.draw(st.sampled_from(["/api/v1/calls"] * 3 + sorted(routes)))
    query, values = data.draw(query_strings(routes[path]))
    response = world.agent.get(f"{path}?{query}")
    event(f"{path if routes[path] else 'a route reading none'}: {response.status_code}")
    assert response.status_code in {200, 400}
    assert response["Content-Type"] == "application/json"
    if response.status_code == 400:
        assert routes[path], "a route that reads no parameter ignores them all"
        api_refusal(response, routes[path], values)


def _timeout_of(query: str) -> int | ApiError:
    try:
        return longpoll._timeout({"query_string": query.encode("latin-1")})
    except ApiError as error:
        return error


@settings(PROPERTY, max_examples=200)
@given(query=query_strings(("timeout",)))
def test_the_long_polls_timeout_is_in_range_or_a_400_naming_it(
    query: tuple[str, list[str]],
) -> None:
    text, values = query
    answer = _timeout_of(text)
    if isinstance(answer, ApiError):
        assert answer.status == 400
        assert "timeout" in answer.message
        assert_not_echoed(answer.message, values)
    else:
        assert 0 <= answer <= django_settings.COUNTERSIGN_MAX_WAIT


@settings(PROPERTY, max_examples=200)
@given(query=query_strings(("since",)))
def test_the_agent_sockets_since_is_a_time_or_refused(query: tuple[str, list[str]]) -> None:
    try:
        moment = consumers.parse_since(query[0].encode("latin-1"))
    except ValueError:
        return  # the socket closes with 4400 (test_consumers.py)
    assert moment is None or moment.utcoffset() == timedelta(0)


# --- the cases of issue 13 and their neighbours, one by one --------------------------------


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("until=9999-12-31", "until"),
        ("since=9999-12-31", "since"),
        ("since=0000-01-01", "since"),
        ("until=2025-02-30", "until"),
        ("since=12/31/2024", "since"),
        ("since=2025-03-02&until=2025-03-01", "until"),
        (f"page={10**30}", "page"),
        ("page=0", "page"),
        ("page=-1", "page"),
        ("page=2", "page"),
        ("page=1.0", "page"),
        (f"agent={10**30}", "agent"),
        ("agent=-1", "agent"),
        ("agent=1_0", "agent"),
        ("agent=%EF%BC%91", "agent"),  # a fullwidth digit one, which int() would take
        ("status=pending", "status"),
        ("status=Approved", "status"),
        ("tool=pay%00", "tool"),
        ("tool=" + "x" * 129, "tool"),
        ("principal=" + "x" * 201, "principal"),
        ("principal=%00", "principal"),
    ],
)
def test_a_bad_history_parameter_is_a_400_naming_it(world: World, query: str, name: str) -> None:
    response = world.approver.get(f"/history/?{query}")
    assert response.status_code == 400
    body = response.content.decode()
    if name == "page":
        assert bad_parameter("page", QUERY_RANGE.format(low=1, high=1)) in body
    else:
        assert bad_parameter(name, HISTORY_EXPECTED[name]) in body
    assert "Traceback" not in body


@pytest.mark.parametrize("name", HISTORY_PARAMETERS)
def test_no_history_refusal_echoes_the_value(world: World, name: str) -> None:
    response = world.approver.get("/history/", {name: f"{SECRET}\x00"})
    assert response.status_code == 400
    assert_page_refusal(response, (name,), [SECRET])
    repeated = world.approver.get(f"/history/?{name}=&{name}={quote(SECRET)}")
    assert QUERY_REPEATED.format(name=name) in repeated.content.decode()
    assert_not_echoed(repeated.content.decode(), [SECRET])


def test_the_widest_history_range_and_empty_values_are_fine(world: World) -> None:
    first, last = date.min.isoformat(), (date.max - timedelta(days=1)).isoformat()
    everything = world.approver.get(f"/history/?since={first}&until={last}&page=1")
    assert everything.status_code == 200
    assert f"/calls/{world.final.pk}/" in everything.content.decode()
    empty = "status=&agent=&tool=&principal=&since=&until=&page="
    assert world.approver.get(f"/history/?{empty}&utm_source=x").status_code == 200


def test_an_htmx_request_gets_the_refusal_as_text_for_the_notice(world: World) -> None:
    response = world.approver.get("/history/?until=9999-12-31", headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode() == bad_parameter("until", HISTORY_EXPECTED["until"])


def test_more_parameters_than_django_reads_is_a_400_on_pages_and_the_api(world: World) -> None:
    many = "&".join(f"p{i}=1" for i in range(1001))
    message = QUERY_TOO_MANY.format(most=1000)
    for client, path in [
        (world.approver, "/history/"),
        (world.approver, "/"),
        (world.anonymous, "/accounts/login/"),
        (world.admin, "/admin/approvals/call/"),
    ]:
        response = client.get(f"{path}?{many}")
        assert response.status_code == 400
        assert message in response.content.decode()
    refused = world.agent.get(f"/api/v1/calls?{many}")
    assert refused.status_code == 400
    assert json.loads(refused.content)["error"]["message"] == message


def test_djangos_own_pages_refuse_a_nul_and_a_repeated_next(world: World) -> None:
    nul = world.admin.get("/admin/approvals/call/?status__exact=%00")
    assert nul.status_code == 400
    assert QUERY_NUL in nul.content.decode()
    login = world.anonymous.get("/accounts/login/?next=/%00")
    assert login.status_code == 400
    assert bad_parameter("next", NEXT_EXPECTED) in login.content.decode()
    twice = world.anonymous.get("/accounts/login/?next=/a&next=/b")
    assert twice.status_code == 400
    assert QUERY_REPEATED.format(name="next") in twice.content.decode()
    foreign = world.anonymous.get("/accounts/login/?next=https://elsewhere.example/")
    assert foreign.status_code == 200
    assert "elsewhere" not in foreign.content.decode()


def test_with_debug_a_refusal_is_never_the_traceback_page(world: World, settings: Any) -> None:
    settings.DEBUG = True
    pages = [
        world.approver.get("/history/?until=9999-12-31"),
        world.approver.get("/history/?" + "&".join(f"p{i}=" for i in range(1001))),
        # The admin's own SuspiciousOperation: a field it does not offer to popups.
        world.admin.get("/admin/approvals/call/?_to_field=arguments"),
    ]
    for response in pages:
        assert response.status_code == 400
        body = response.content.decode()
        assert "Bad request" in body
        assert "Traceback" not in body
        assert "settings" not in body.lower()
    api_many = world.agent.get("/api/v1/calls?" + "&".join(f"p{i}=" for i in range(1001)))
    assert api_many.status_code == 400
    assert json.loads(api_many.content)["error"]["code"] == "bad_request"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=1&limit=2", QUERY_REPEATED.format(name="limit")),
        ("status=pending&status=pending", QUERY_REPEATED.format(name="status")),
        (f"offset={10**30}", BAD_QUERY.format(name="offset", expected=f"0 to {10**9}")),
        ("limit=%00", BAD_QUERY.format(name="limit", expected="1 to 100")),
        (
            "run_id=" + "r" * 201,
            BAD_QUERY.format(name="run_id", expected=QUERY_TEXT.format(most=200)),
        ),
    ],
)
def test_a_bad_list_parameter_is_a_400_naming_it(world: World, query: str, message: str) -> None:
    response = world.agent.get(f"/api/v1/calls?{query}")
    assert response.status_code == 400
    assert json.loads(response.content)["error"] == {"code": "bad_request", "message": message}


def test_a_run_id_of_the_longest_kind_is_fine(world: World) -> None:
    assert world.agent.get("/api/v1/calls", {"run_id": "r" * 200}).status_code == 200


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("timeout=1&timeout=1", QUERY_REPEATED.format(name="timeout")),
        (f"timeout={10**30}", BAD_QUERY.format(name="timeout", expected="0 to 60")),
        ("timeout=", BAD_QUERY.format(name="timeout", expected="0 to 60")),
        ("timeout=%ff", BAD_QUERY.format(name="timeout", expected="0 to 60")),
        ("timeout=\xff", BAD_QUERY.format(name="timeout", expected="0 to 60")),  # a raw byte
    ],
)
def test_a_bad_long_poll_timeout_is_a_400_naming_it(
    query: str, expected: str, settings: Any
) -> None:
    settings.COUNTERSIGN_MAX_WAIT = 60
    answer = _timeout_of(query)
    assert isinstance(answer, ApiError)
    assert (answer.status, answer.message) == (400, expected)


def test_unknown_parameters_are_ignored_everywhere(world: World) -> None:
    extra = "utm_source=x&_=1700000000&debug=1"
    checks: list[tuple[Callable[[str], Response], str]] = [
        (world.approver.get, f"/?{extra}"),
        (world.approver.get, f"/history/?{extra}"),
        (world.approver.get, f"/calls/{world.held.pk}/?{extra}"),
        (world.agent.get, f"/api/v1/calls?{extra}"),
        (world.agent.get, f"/api/v1/calls/{world.held.pk}?{extra}"),
    ]
    for get, url in checks:
        assert get(url).status_code == 200, url
    assert _timeout_of(f"{extra}&timeout=3") == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/history/", "/accounts/login/", "/api/v1/calls"])
async def test_a_query_string_that_is_not_utf8_is_a_400(path: str) -> None:
    """Bytes no test client sends, and uvicorn refuses before the application: another ASGI
    server could pass them on, and then Django answers its own empty ``400``."""
    scope = http_scope(
        "GET", path, [(b"host", b"127.0.0.1")], query_string=b"until=\xff\xfe&next=\xc3"
    )
    sent, _ = await chunked_request(application, scope, [b""])
    assert sent[0]["status"] == 400
