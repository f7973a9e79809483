"""For load balancers and Prometheus: ``GET /healthz``, ``GET /readyz`` and ``GET /metrics``.

None reads a session, sets a cookie or wants a CSRF token, and each borrows the "ops" thread
(``COUNTERSIGN_PATH_POOLS``, config/runtime/pooled_handler.py), so they answer while every
request thread is busy with agents or logins.

- ``/healthz``: the process answers. Reads nothing.
- ``/readyz``: the database answers (and has its tables), and so does Redis when ``REDIS_URL``
  is set, and the identity provider's discovery document can be used when ``OIDC_ISSUER`` is
  (identity/discovery.py); else ``503`` naming what does not.
- ``/metrics``: approvals/ops/metrics.py's series in the Prometheus text format, for a scrape that
  presents ``Authorization: Bearer <COUNTERSIGN_METRICS_TOKEN>``. Without the setting the
  route is a ``404`` like any unknown path; with it, a missing or wrong token is a ``401``.
"""

from __future__ import annotations

import functools
import hmac
import logging

import redis
from django.conf import settings
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

import approvals.ops.metrics  # noqa: F401 (registers the series)
from approvals.selectors.ops import database_answers
from identity.discovery import sso_ready

logger = logging.getLogger(__name__)

DATABASE = "database"
REDIS = "redis"
SSO = "sso"
# A load balancer waits a few seconds for an answer: a Redis that does not answer in this
# one is not ready.
REDIS_TIMEOUT = 1.0  # seconds
METRICS_UNAUTHORIZED = "A scrape of /metrics presents its bearer token (COUNTERSIGN_METRICS_TOKEN)."
BEARER = "bearer "


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
    )


def _redis_answers(url: str) -> bool:
    try:
        return bool(_redis(url).ping())
    except (redis.RedisError, OSError):
        logger.warning("readyz: Redis does not answer", exc_info=True)
        return False


def _database_answers() -> bool:
    try:
        database_answers()
    except DatabaseError:
        logger.warning("readyz: the database does not answer", exc_info=True)
        return False
    return True


@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checked = {DATABASE: _database_answers()}
    if settings.REDIS_URL:
        checked[REDIS] = _redis_answers(settings.REDIS_URL)
    if settings.OIDC_ISSUER:
        checked[SSO] = sso_ready()
    unavailable = [name for name, answers in checked.items() if not answers]
    if unavailable:
        return JsonResponse({"status": "unavailable", "unavailable": unavailable}, status=503)
    return JsonResponse({"status": "ready", "checked": list(checked)})


def _presents_token(request: HttpRequest, token: str) -> bool:
    authorization = request.headers.get("Authorization", "")
    if authorization[: len(BEARER)].lower() != BEARER:
        return False
    presented = authorization[len(BEARER) :].strip()
    return hmac.compare_digest(presented.encode(), token.encode())


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.COUNTERSIGN_METRICS_TOKEN
    if not token:
        raise Http404
    if not _presents_token(request, token):
        return HttpResponse(
            METRICS_UNAUTHORIZED,
            status=401,
            content_type="text/plain; charset=utf-8",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
