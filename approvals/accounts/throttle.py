"""The login throttle: django-axes' backend, first in ``AUTHENTICATION_BACKENDS`` before
Django's ``ModelBackend``.

A username locked out from the client's address is refused before any password is hashed
(approvals/accounts/lockouts.py), and the request says so, so that a lockout is audited once, when
it begins, and not again for each attempt it refuses.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from django.http import HttpRequest

# Set on a request whose login the throttle refused unchecked (a name of ours, so that nothing
# relies on a private one of axes').
REFUSED_LOCKED_OUT = "countersign_refused_locked_out"


def refused_locked_out(request: HttpRequest) -> bool:
    """Whether the throttle refused this request's login because it was locked out already."""
    return bool(getattr(request, REFUSED_LOCKED_OUT, False))


class LoginThrottle(AxesStandaloneBackend):
    """Without a request there is no client address to count by (code calling ``authenticate``
    itself, as the test client's ``login`` does): the throttle stands aside. Every login form
    of the site passes its request."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return
        try:
            super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:
            setattr(request, REFUSED_LOCKED_OUT, True)
            raise
