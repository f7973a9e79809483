"""The approver's pages: thin views over selectors and services."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors
from approvals.services.decisions import DecisionError, call_decide, user_may_decide
from approvals.services.lifecycle import AlreadyFinal, call_extend

VIEW_PERMISSIONS = ("approvals.view_call", "approvals.decide_call")


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)
    if not any(user.has_perm(permission) for permission in VIEW_PERMISSIONS):
        raise PermissionDenied
    return user


def _render_call(request: HttpRequest, call_id: uuid.UUID, *, status: int = 200) -> HttpResponse:
    user = _user(request)
    page = selectors.call_page(call_id=call_id)
    if page is None:
        raise Http404
    context = {"page": page, "may_decide": user_may_decide(user=user, call=page.call)}
    template = "approvals/call.html#call" if request.htmx else "approvals/call.html"  # type: ignore[attr-defined]
    return render(request, template, context, status=status)


@require_GET
@login_required
def call_detail(request: HttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _render_call(request, call_id)


def _decide(request: HttpRequest, call_id: uuid.UUID, *, approve: bool) -> HttpResponse:
    user = _user(request)
    try:
        call_decide(
            call_id=call_id,
            user=user,
            approve=approve,
            comment=request.POST.get("comment", ""),
            arguments_sha256=request.POST.get("arguments_sha256", ""),
            scope=request.POST.get("scope", "once"),
        )
    except DecisionError as error:
        if error.status == 404:
            raise Http404 from None
        if error.status == 403:
            raise PermissionDenied from None
        return HttpResponse(
            str(error) or "The decision was not recorded.",
            status=error.status,
            content_type="text/plain",
        )
    if request.htmx:  # type: ignore[attr-defined]
        return _render_call(request, call_id)
    return HttpResponseRedirect(f"/calls/{call_id}/", status=303)


@require_POST
@login_required
def call_approve(request: HttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _decide(request, call_id, approve=True)


@require_POST
@login_required
def call_deny(request: HttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _decide(request, call_id, approve=False)


@require_POST
@login_required
def call_extend_deadline(request: HttpRequest, call_id: uuid.UUID) -> HttpResponse:
    user = _user(request)
    page = selectors.call_page(call_id=call_id)
    if page is None:
        raise Http404
    if not user_may_decide(user=user, call=page.call):
        raise PermissionDenied
    try:
        call_extend(call_id=call_id, user=user)
    except AlreadyFinal:
        return HttpResponse(
            "The call is final or was extended already.", status=409, content_type="text/plain"
        )
    return HttpResponseRedirect(f"/calls/{call_id}/", status=303)
