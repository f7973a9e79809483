"""Who is acting, for the audit entries written from model signals
(``approvals/accounts/receivers.py``), which are not handed the request: the signed-in person of the
request being served, or nobody (a management command, the shell, a password reset by e-mail
link)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse

_request: ContextVar[HttpRequest | None] = ContextVar("countersign_acting_request", default=None)


def acting_user() -> User | None:
    """The request's signed-in person, if any; read only when an entry is written."""
    request = _request.get()
    user = getattr(request, "user", None)
    return user if isinstance(user, User) and user.is_authenticated else None


def acting_request(
    get_response: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Makes the request known to ``acting_user`` while it is served (after Django's
    ``AuthenticationMiddleware``). Synchronous, as the rest of the chain: the signal handlers
    run in the same thread and context as the view."""

    def middleware(request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return get_response(request)
        finally:
            _request.reset(token)

    return middleware
