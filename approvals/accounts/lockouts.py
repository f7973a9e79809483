"""Throttled logins, with django-axes: the page a locked-out login gets, and the audit of a
lockout as it begins.

axes counts failed logins per username and client address (config/settings.py, "Logins").
At ``COUNTERSIGN_LOGIN_FAILURES`` the pair is locked out for
``COUNTERSIGN_LOGIN_LOCKOUT_MINUTES``: the failure that reached it and every login of the pair
until then, right password or not, get the login page again with ``LOCKED_OUT`` (``429``,
``Retry-After``), on the approver's login and the admin's alike, and no password is hashed
for them (``auth.LoginThrottle``). A passkey sign-in counts and is refused the same way,
under the username of the passkey it names (identity/backends.py), its ``429`` plain text.
Admin lifts a lockout by deleting its access attempt (``admin.LoginAttemptAdmin``,
audited). The page names neither the username nor the address the client sent.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from approvals.accounts.throttle import refused_locked_out
from approvals.services.logins import login_lockout_record

LOCKED_OUT = (
    "Too many failed logins for this username from your address: it is locked out for "
    "{minutes} minutes. Try again then, or ask an admin to unlock it."
)
LOCKED_OUT_STATUS = 429
# The passkey sign-in's URL name (identity/urls.py): throttled as the login pages are.
PASSKEY_SIGN_IN = "passkey-sign-in"


def locked_out_message() -> str:
    return LOCKED_OUT.format(minutes=settings.COUNTERSIGN_LOGIN_LOCKOUT_MINUTES)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the login page the request came from, its form empty, with
    the lockout's message; to the passkey sign-in, which a script posts, the message alone."""
    message = locked_out_message()
    if request.path == reverse(PASSKEY_SIGN_IN):
        response = HttpResponse(message, status=LOCKED_OUT_STATUS, content_type="text/plain")
        response["Retry-After"] = str(settings.COUNTERSIGN_LOGIN_LOCKOUT_MINUTES * 60)
        return response
    if request.path == reverse("admin:login"):
        template = "admin/login.html"
        context = {
            **admin.site.each_context(request),
            "title": "Log in",
            "app_path": request.path,
            "form": AdminAuthenticationForm(request),
            "locked_out": message,
        }
    else:
        template = "registration/login.html"
        context = {"form": AuthenticationForm(request), "locked_out": message}
    response = render(request, template, context, status=LOCKED_OUT_STATUS)
    response["Retry-After"] = str(settings.COUNTERSIGN_LOGIN_LOCKOUT_MINUTES * 60)
    return response


def _lockout_began(
    sender: Any,
    request: HttpRequest | None,
    username: str | None,
    ip_address: str | None,
    **kwargs: Any,
) -> None:
    """axes says a login is locked out: when it is the failure that reached the limit (not a
    login refused while locked out already), audit the lockout."""
    if request is None or refused_locked_out(request):
        return
    login_lockout_record(username=username, ip_address=ip_address)


def connect() -> None:
    """Called from ``ApprovalsConfig.ready``."""
    user_locked_out.connect(_lockout_began, dispatch_uid="countersign-login-lockout")
