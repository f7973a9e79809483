"""The login pages (the approvers' and admin's) and single sign-on's two steps:
``/sso/login/`` sends the browser to the provider, ``/sso/callback/`` signs them in.

mozilla-django-oidc's views do the protocol (state, nonce and PKCE verifier kept in the
session, each state used once); here the endpoints come from discovery, the redirect URI from
``COUNTERSIGN_PUBLIC_URL``, and anything that goes wrong ends at the login page saying so,
with nobody signed in.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from identity.backends import callback_url, library_setting
from identity.discovery import SsoUnavailable, sso_provider
from identity.selectors import sign_in_offer

logger = logging.getLogger(__name__)

PASSWORD_OFF_TEMPLATE = "identity/password_off.html"  # noqa: S105 (a template)
SSO_FAILED = "failed"


def _password_off(request: HttpRequest) -> HttpResponse:
    return render(request, PASSWORD_OFF_TEMPLATE, {"sign_in": sign_in_offer()}, status=403)


class SignInView(LoginView):
    """The approvers' login page: the password form unless ``COUNTERSIGN_PASSWORD_LOGIN`` is
    off (then a posted password is a ``403``), and **Sign in with …** when SSO is set up."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.COUNTERSIGN_PASSWORD_LOGIN:
            return _password_off(request)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sign_in"] = sign_in_offer()
        context["sso_failed"] = self.request.GET.get("sso") == SSO_FAILED
        return context


def admin_sign_in(request: HttpRequest) -> HttpResponse:
    """Admin's login page, as the approvers' is."""
    if request.method == "POST" and not settings.COUNTERSIGN_PASSWORD_LOGIN:
        return _password_off(request)
    context = {"sign_in": sign_in_offer(), "sso_failed": request.GET.get("sso") == SSO_FAILED}
    return admin.site.login(request, extra_context=context)


class SsoStartView(OIDCAuthenticationRequestView):
    """``GET /sso/login/?next=…``: to the provider's authorization endpoint."""

    def __init__(self, **kwargs: Any) -> None:
        # The library reads its endpoints here, from settings: they come from discovery below.
        View.__init__(self, **kwargs)

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            provider = sso_provider()
        except SsoUnavailable:
            return HttpResponseRedirect(reverse("login"))
        self.OIDC_OP_AUTH_ENDPOINT = provider.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        response: HttpResponseBase = super().get(request)  # type: ignore[no-untyped-call]
        return response

    def get_extra_params(self, request: HttpRequest) -> dict[str, str]:
        return {"redirect_uri": callback_url()}


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """``GET /sso/callback/?code=…&state=…``: the person signed in for at most
    ``COUNTERSIGN_SSO_SESSION_HOURS``; else back to the login page, which says it failed."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response: HttpResponseBase = super().get(request)  # type: ignore[no-untyped-call]
        except (SuspiciousOperation, SsoUnavailable, requests.RequestException, ValueError):
            # An unknown or replayed state, a token that fails its checks, a provider that
            # does not answer: logged for the operator, and the person is not signed in.
            logger.warning("single sign-on failed", exc_info=True)
            failure: HttpResponseBase = self.login_failure()  # type: ignore[no-untyped-call]
            return failure
        return response

    def login_success(self) -> HttpResponseBase:
        response: HttpResponseBase = super().login_success()  # type: ignore[no-untyped-call]
        hours = settings.COUNTERSIGN_SSO_SESSION_HOURS
        # A fixed end, not one renewed by each request the session makes.
        self.request.session.set_expiry(timezone.now() + timedelta(hours=hours))
        return response
