"""The query strings of every page outside the agent API: a value no page can use is a
``400`` page in the site's style that names the parameter and what it may be, never the value
(docs/ui.md, "Query strings"), and never Django's traceback page, even with ``DEBUG``.

The approver's pages check each parameter they read themselves (``checks_own_query``) and
ignore the others. For Django's own pages (the admin's lists, the login), ``QueryStringCheck``
refuses what none of them can take: U+0000, which PostgreSQL cannot compare (an admin list
filter would fail in the database), a repeated ``next``, and more parameters than
``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (on every page). The agent API (``/api/``) answers its own
refusals in JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.conf import settings
from django.core.exceptions import SuspiciousOperation, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from approvals.api.errors import BAD_QUERY, QUERY_REPEATED, QUERY_TOO_MANY
from approvals.querydict import ParameterRepeated, query_values
from approvals.web.htmx import HtmxHttpRequest

QUERY_NUL = "A query parameter holds U+0000, which no page accepts."
# The one parameter Django's own pages read as a single value (the login's, the admin's and
# the logout's), and what it may be; a path that is not on this site leads to the queue.
NEXT = "next"
NEXT_EXPECTED = "a path on this site, without U+0000"
REQUEST_MALFORMED = "The request could not be understood."
API_PREFIX = "/api/"

View = TypeVar("View", bound=Callable[..., HttpResponse])


class BadQuery(Exception):
    """The page cannot be shown for this query string: one sentence per bad parameter."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(*self.problems)


def bad_parameter(name: str, expected: str) -> str:
    return BAD_QUERY.format(name=name, expected=expected)


def single_values(query: QueryDict, names: Iterable[str]) -> dict[str, str]:
    """The named parameters that are given, each with its value; ``BadQuery`` naming each
    one given more than once."""
    try:
        return query_values(query, names)
    except ParameterRepeated as repeated:
        raise BadQuery(QUERY_REPEATED.format(name=name) for name in repeated.names) from None


def query_refused(request: HtmxHttpRequest, problems: Iterable[str]) -> HttpResponse:
    """The ``400``: the page for a browser; for an htmx request the sentences as plain text,
    which ``countersign.js`` shows in the page's notice (htmx swaps no ``4xx``)."""
    problems = tuple(problems)
    if request.htmx:
        return HttpResponse(" ".join(problems), status=400, content_type="text/plain")
    return render(request, "400.html", {"problems": problems}, status=400)


def checks_own_query(view: View) -> View:
    """Marks a view that checks every query parameter it reads (or reads none), so that
    ``QueryStringCheck`` leaves the rest to it."""
    view.checks_own_query = True  # type: ignore[attr-defined]
    return view


class QueryStringCheck:
    """The query-string rules every page outside the API keeps (see the module's doc)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HtmxHttpRequest,
        view: Callable[..., HttpResponse],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> HttpResponse | None:
        if request.path.startswith(API_PREFIX):
            return None
        try:
            query = request.GET
        except TooManyFieldsSent:
            most = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            return query_refused(request, [QUERY_TOO_MANY.format(most=most)])
        if getattr(view, "checks_own_query", False):
            return None
        try:
            next_path = single_values(query, [NEXT]).get(NEXT, "")
        except BadQuery as bad:
            return query_refused(request, bad.problems)
        if "\x00" in next_path:
            return query_refused(request, [bad_parameter(NEXT, NEXT_EXPECTED)])
        if any("\x00" in name or "\x00" in "".join(values) for name, values in query.lists()):
            return query_refused(request, [QUERY_NUL])
        return None

    def process_exception(
        self, request: HtmxHttpRequest, exception: Exception
    ) -> HttpResponse | None:
        """A page's ``SuspiciousOperation`` (the admin's, for a query naming a field it does
        not offer) is a ``400`` anyway; answered here, it is the site's page even under
        ``DEBUG``, where Django would show its traceback page. Logged as Django logs it."""
        if request.path.startswith(API_PREFIX) or not isinstance(exception, SuspiciousOperation):
            return None
        logging.getLogger(f"django.security.{type(exception).__name__}").error(
            str(exception), extra={"status_code": 400, "request": request}
        )
        return query_refused(request, [REQUEST_MALFORMED])
