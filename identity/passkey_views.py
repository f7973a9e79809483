"""Passkeys' pages and ceremonies: ``/account/`` (the person's passkeys, add, remove),
**Sign in with a passkey**, and the options of a decision's step-up. Thin: the WebAuthn work
is ``identity.passkeys``'; static/js/passkeys.js runs the browser's side.

A ceremony is two POSTs: the options (JSON, py_webauthn's ``options_to_json``), then the
browser's answer (``credential``: the ``PublicKeyCredential`` as JSON, base64url). A refusal
is a ``403`` whose text says why in fixed words; a sign-in the login throttle refuses, a
``429`` (approvals/accounts/lockouts.py).
"""

from __future__ import annotations

import uuid

from django.contrib.auth import authenticate, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from approvals.errors import NotFound, NotPermitted
from approvals.selectors.deciders import may_view
from identity.backends import passkey_refusal
from identity.passkeys import (
    ASSERTION_NOT_VALID,
    CHALLENGE_UNUSABLE,
    passkey_register,
    passkey_registration_begin,
    passkey_remove,
    passkey_sign_in_begin,
    stepup_begin,
)
from identity.selectors import passkey_claimed_username, passkeys_of, passkeys_offered

ACCOUNT_TEMPLATE = "identity/account.html"
# The nonce of the ceremony this browser started, by purpose.
REGISTER_SESSION_KEY = "countersign.passkey.register"
SIGN_IN_SESSION_KEY = "countersign.passkey.sign_in"
BACKEND = "identity.backends.PasskeyBackend"
STEP_UP_VERBS = {"approve": True, "deny": False}


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)
    return user


def _refused(message: str) -> HttpResponse:
    return HttpResponse(message, status=403, content_type="text/plain")


def _options(text: str) -> HttpResponse:
    return HttpResponse(text, content_type="application/json")


@require_GET
@login_required
def account(request: HttpRequest) -> HttpResponse:
    """The signed-in person's passkeys, and Add a passkey."""
    user = _user(request)
    context = {"passkeys": passkeys_of(user=user), "offered": passkeys_offered()}
    return render(request, ACCOUNT_TEMPLATE, context)


@require_POST
@login_required
def registration_options(request: HttpRequest) -> HttpResponse:
    try:
        nonce, options = passkey_registration_begin(user=_user(request))
    except NotPermitted as refused:
        return _refused(refused.message)
    request.session[REGISTER_SESSION_KEY] = nonce
    return _options(options)


@require_POST
@login_required
def registration(request: HttpRequest) -> HttpResponse:
    nonce = request.session.pop(REGISTER_SESSION_KEY, "")
    try:
        passkey_register(
            user=_user(request),
            nonce=nonce,
            credential=request.POST.get("credential", ""),
            name=request.POST.get("name", ""),
        )
    except NotPermitted as refused:
        return _refused(refused.message or CHALLENGE_UNUSABLE)
    return JsonResponse({"next": "/account/"})


@require_POST
@login_required
def removal(request: HttpRequest, passkey_id: int) -> HttpResponse:
    try:
        passkey_remove(user=_user(request), passkey_id=passkey_id)
    except NotFound:
        raise Http404 from None
    return HttpResponseRedirect("/account/", status=303)


@require_POST
def sign_in_options(request: HttpRequest) -> HttpResponse:
    try:
        nonce, options = passkey_sign_in_begin()
    except NotPermitted as refused:
        return _refused(refused.message)
    request.session[SIGN_IN_SESSION_KEY] = nonce
    return _options(options)


@require_POST
def sign_in(request: HttpRequest) -> HttpResponse:
    """The person the assertion names, logged in; where to go next (the ``next`` posted, if
    it is on this site)."""
    nonce = request.session.pop(SIGN_IN_SESSION_KEY, "")
    credential = request.POST.get("credential", "")
    # Through ``authenticate``, as a password is: throttled, and logged, alike. A lockout's
    # answer is the throttle's (429).
    user = authenticate(
        request,
        username=passkey_claimed_username(credential=credential),
        passkey_nonce=nonce,
        passkey_credential=credential,
    )
    if user is None:
        return _refused(passkey_refusal(request) or ASSERTION_NOT_VALID)
    login(request, user, backend=BACKEND)
    wanted = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return JsonResponse({"next": wanted if wanted and safe else "/"})


@require_POST
@login_required
def step_up_options(request: HttpRequest, call_id: uuid.UUID, verb: str) -> HttpResponse:
    """The options of one decision's assertion: ``{"nonce": …, "options": …}``."""
    user = _user(request)
    if not may_view(user):
        raise PermissionDenied
    approve = STEP_UP_VERBS.get(verb)
    if approve is None:
        raise Http404
    try:
        options = stepup_begin(
            user=user,
            call_id=call_id,
            arguments_sha256=request.POST.get("arguments_sha256", "")[:64],
            approve=approve,
        )
    except NotPermitted as refused:
        return _refused(refused.message)
    return _options(options)
