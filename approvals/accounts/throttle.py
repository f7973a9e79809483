"""The throttles of the accounts' pages.

- **Logins**: django-axes' backend, first in ``AUTHENTICATION_BACKENDS`` before Django's
  ``ModelBackend``. A username locked out from the client's address is refused before any
  password is hashed (approvals/accounts/lockouts.py), and the request says so, so that a
  lockout is audited once, when it begins, and not again for each attempt it refuses.
- **Password reset requests**: at most ``COUNTERSIGN_PASSWORD_RESET_RATE`` per email address
  and as many per client address, counted as the agents' submissions are (across workers in
  Redis when ``REDIS_URL`` is set, per process otherwise). A request over either limit sends
  no mail and gets the same answer as any other (approvals/accounts/password_reset.py).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from django.conf import settings
from django.http import HttpRequest

from approvals.api.ratelimit import Limiter, LimiterUnavailable, LocalLimiter, RedisLimiter

logger = logging.getLogger(__name__)

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


# --- password reset requests ----------------------------------------------------------------

RESET_KEY = "password-reset:"
# A process's own counts forget an address or a client after its window has passed, checked
# this often: anyone may send a new address each time, and those must not pile up.
FORGET_EVERY_SECONDS = 60.0


class _ForgettingLimiter(LocalLimiter):
    """``LocalLimiter`` whose keys are dropped once their window has passed."""

    def __init__(self, limit: int, window_seconds: int) -> None:
        super().__init__(limit, window_seconds)
        self._forgot_at = time.monotonic()

    def hit(self, key: str) -> int | None:
        wait = super().hit(key)
        now = time.monotonic()
        if now - self._forgot_at >= FORGET_EVERY_SECONDS:
            self._forgot_at = now
            with self._lock:
                since = now * 1000 - self.window_ms
                for idle in [k for k, log in self._log.items() if not log or log[-1] <= since]:
                    del self._log[idle]
        return wait


_reset_limiters: dict[tuple[tuple[int, int], str], Limiter] = {}
_reset_limiters_lock = threading.Lock()


def _reset_limiter(rate: tuple[int, int], redis_url: str) -> Limiter:
    with _reset_limiters_lock:
        limiter = _reset_limiters.get((rate, redis_url))
        if limiter is None:
            limit, window = rate
            limiter = _reset_limiters[(rate, redis_url)] = (
                RedisLimiter(redis_url, limit, window)
                if redis_url
                else _ForgettingLimiter(limit, window)
            )
        return limiter


def _digest(text: str) -> str:
    # Keys hold no address in the clear: Redis is no place for a list of people's mail.
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def password_reset_allowed(*, request: HttpRequest, email: str) -> bool:
    """Count a password reset request for ``email`` from the request's client; False when
    that client or that address has had its share (nothing is counted for the address
    then), or when the count cannot be read (Redis down: no mail rather than unlimited)."""
    rate = settings.COUNTERSIGN_PASSWORD_RESET_RATE
    if rate is None:
        return True
    limiter = _reset_limiter(rate, settings.REDIS_URL)
    client = str(request.META.get("REMOTE_ADDR") or "unknown")
    address = email.strip().casefold()
    try:
        if limiter.hit(f"{RESET_KEY}client:{_digest(client)}") is not None:
            logger.info("password reset request refused: too many from this client")
            return False
        if limiter.hit(f"{RESET_KEY}address:{_digest(address)}") is not None:
            logger.info("password reset request refused: too many for this address")
            return False
    except LimiterUnavailable:
        logger.warning("password reset request refused: its count could not be read", exc_info=True)
        return False
    return True
