"""The approver's pages: thin views over selectors and services.

Every page needs a logged-in user with ``approvals.view_call`` or ``approvals.decide_call``
(else ``403``). A page and its partials come from one template: the whole page for a
browser, the named partial for an htmx request, the same partials for a WebSocket push.
Each checks the query parameters it reads (``checks_own_query``) and ignores any other: a
value it cannot use is a ``400`` naming the parameter (``approvals.web.querystring``).
"""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from approvals.errors import (
    ApplicationError,
    Conflict,
    Invalid,
    NotFound,
    NotPermitted,
    Unavailable,
)
from approvals.models import Approval
from approvals.selectors.deciders import DECIDE_PERMISSION, may_view
from approvals.services.decisions import BATCH_LIMIT, call_decide, calls_decide
from approvals.services.lifecycle import call_extend
from approvals.stepup import VerifiedPasskey
from approvals.web.call_page import call_page
from approvals.web.forms import HistoryFilterForm, history_page, posted_arguments
from approvals.web.history_page import history_calls, history_rows
from approvals.web.htmx import HtmxHttpRequest
from approvals.web.querystring import BadQuery, checks_own_query, query_refused, single_values
from approvals.web.queue_page import batch_result, queue_for_user
from identity.passkeys import PasskeyRefused, stepup_verify

HISTORY_PAGE_SIZE = 50
# A batch's report, kept in the session from the plain form's POST to the queue it redirects to.
BATCH_SESSION_KEY = "countersign.batch"
BATCH_VERBS = {"approve": True, "deny": False}
BATCH_BAD_VERB = "The verb must be approve or deny."
BATCH_EMPTY = "Select at least one call."
BATCH_TOO_MANY = f"At most {BATCH_LIMIT} calls at once."
HISTORY_PARAMETERS = (*HistoryFilterForm.base_fields, "page")
DECISION_REFUSED = "The decision was not recorded."
EXTENSION_REFUSED = "The call is final or was extended already."
# The status of each kind of domain refusal, the first that matches.
REFUSAL_STATUSES: tuple[tuple[type[ApplicationError], int], ...] = (
    (NotFound, 404),
    (NotPermitted, 403),
    (Invalid, 400),
    (Conflict, 409),
    (Unavailable, 503),
)


def _user(request: HtmxHttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)
    if not may_view(user):
        raise PermissionDenied
    return user


def _refused(error: ApplicationError, *, default: str) -> HttpResponse:
    """A domain refusal as the page's answer: Django's 404 page, or its 403 page when the
    refusal gives no reason; otherwise its kind's status and its message (else ``default``)
    as text, which htmx shows beside the buttons."""
    if isinstance(error, NotFound):
        raise Http404 from None
    if isinstance(error, NotPermitted) and not error.message:
        raise PermissionDenied from None
    status = next((status for kind, status in REFUSAL_STATUSES if isinstance(error, kind)), 400)
    return HttpResponse(error.message or default, status=status, content_type="text/plain")


def _template(request: HtmxHttpRequest, name: str, partial: str) -> str:
    """The page for a browser; only its named partial for an htmx request."""
    return f"{name}#{partial}" if request.htmx else name


@checks_own_query
@require_GET
@login_required
def queue(request: HtmxHttpRequest) -> HttpResponse:
    user = _user(request)
    context: dict[str, object] = {"queue": queue_for_user(user=user)}
    if not request.htmx and BATCH_SESSION_KEY in request.session:
        kept = request.session.pop(BATCH_SESSION_KEY)
        context["batch"] = batch_result(
            approve=bool(kept["approve"]), outcomes=[tuple(line) for line in kept["outcomes"]]
        )
    return render(request, _template(request, "approvals/queue.html", "queue"), context)


@checks_own_query
@require_POST
@login_required
def calls_decide_many(request: HtmxHttpRequest) -> HttpResponse:
    """``POST /calls/decide``: one decision per ``call`` field (``<id>:<arguments_sha256>``)
    with one ``verb`` and ``comment`` (docs/ui.md, "Decide many at once"). An htmx request
    gets the report (the queue's socket brings the rows' changes); the plain form is
    redirected to the queue, which shows the report once."""
    user = _user(request)
    approve = BATCH_VERBS.get(request.POST.get("verb", ""))
    fields = request.POST.getlist("call")
    problem = BATCH_EMPTY if not fields else BATCH_TOO_MANY if len(fields) > BATCH_LIMIT else ""
    if approve is None or problem:
        return HttpResponse(problem or BATCH_BAD_VERB, status=400, content_type="text/plain")
    if not user.has_perm(DECIDE_PERMISSION):
        raise PermissionDenied
    outcomes = calls_decide(
        user=user,
        approve=approve,
        comment=request.POST.get("comment", ""),
        calls=fields,
        passkeys=_batch_passkeys(request, user, fields, approve=approve),
    )
    report = [
        (
            str(o.call_id) if o.call_id is not None else o.field[:80],
            o.decided,
            o.outcome if o.decided else o.reason,
            o.call.status if o.call is not None else "",
        )
        for o in outcomes
    ]
    if request.htmx:
        # The report only: the queue's socket is what changes the rows on the page
        # (approvals.realtime.queue_updates sends it only the rows that changed since its last
        # push).
        context = {"batch": batch_result(approve=approve, outcomes=report)}
        return render(request, "approvals/queue.html#batch-result", context)
    request.session[BATCH_SESSION_KEY] = {"approve": approve, "outcomes": report}
    return HttpResponseRedirect("/", status=303)


def _batch_passkeys(
    request: HtmxHttpRequest, user: User, fields: list[str], *, approve: bool
) -> dict[uuid.UUID, VerifiedPasskey]:
    """The assertions posted for calls of a batch (``passkey_credential:<call id>`` and
    ``passkey_nonce:<call id>``), each verified for its call and digest; one that does not
    verify is left out, and the decision service refuses its call with the reason."""
    verified: dict[uuid.UUID, VerifiedPasskey] = {}
    for field in fields:
        call_id, _, digest = field.strip().partition(":")
        try:
            parsed = uuid.UUID(call_id)
        except ValueError:
            continue
        if f"{PASSKEY_CREDENTIAL}:{parsed}" not in request.POST:
            continue
        try:
            passkey = _passkey(request, user, parsed, digest, approve=approve)
        except PasskeyRefused:
            continue
        if passkey is not None:
            verified[parsed] = passkey
    return verified


def _render_call(request: HtmxHttpRequest, call_id: uuid.UUID) -> HttpResponse:
    user = _user(request)
    page = call_page(call_id=call_id, user=user)
    if page is None:
        raise Http404
    context = {"page": page}
    return render(request, _template(request, "approvals/call.html", "call"), context)


@checks_own_query
@require_GET
@login_required
def call_detail(request: HtmxHttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _render_call(request, call_id)


# The step-up's fields a decision at a passkey gate posts (static/js/passkeys.js): the nonce
# its options came with, and the browser's PublicKeyCredential as JSON.
PASSKEY_NONCE = "passkey_nonce"
PASSKEY_CREDENTIAL = "passkey_credential"


def _passkey(
    request: HtmxHttpRequest, user: User, call_id: uuid.UUID, digest: str, *, approve: bool
) -> VerifiedPasskey | None:
    """The posted assertion for this decision, verified; None when none is posted (the
    decision service then refuses a call at a passkey gate); ``PasskeyRefused`` if invalid."""
    credential = request.POST.get(f"{PASSKEY_CREDENTIAL}:{call_id}") or request.POST.get(
        PASSKEY_CREDENTIAL, ""
    )
    if not credential:
        return None
    nonce = request.POST.get(f"{PASSKEY_NONCE}:{call_id}") or request.POST.get(PASSKEY_NONCE, "")
    return stepup_verify(
        user=user,
        call_id=call_id,
        arguments_sha256=digest,
        approve=approve,
        nonce=nonce,
        credential=credential,
    )


def _decide(request: HtmxHttpRequest, call_id: uuid.UUID, *, approve: bool) -> HttpResponse:
    user = _user(request)
    digest = request.POST.get("arguments_sha256", "")
    try:
        passkey = _passkey(request, user, call_id, digest, approve=approve)
        call_decide(
            call_id=call_id,
            user=user,
            approve=approve,
            comment=request.POST.get("comment", ""),
            arguments_sha256=digest,
            scope=request.POST.get("scope", Approval.Scope.ONCE),
            arguments=posted_arguments(request.POST) if approve else None,
            passkey=passkey,
        )
    except ApplicationError as error:
        return _refused(error, default=DECISION_REFUSED)
    if request.htmx:
        return _render_call(request, call_id)
    return HttpResponseRedirect(f"/calls/{call_id}/", status=303)


@checks_own_query
@require_POST
@login_required
def call_approve(request: HtmxHttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _decide(request, call_id, approve=True)


@checks_own_query
@require_POST
@login_required
def call_deny(request: HtmxHttpRequest, call_id: uuid.UUID) -> HttpResponse:
    return _decide(request, call_id, approve=False)


@checks_own_query
@require_POST
@login_required
def call_extend_deadline(request: HtmxHttpRequest, call_id: uuid.UUID) -> HttpResponse:
    user = _user(request)
    page = call_page(call_id=call_id, user=user)
    if page is None:
        raise Http404
    if not page.may_decide:
        raise PermissionDenied
    try:
        call_extend(call_id=call_id, user=user)
    except ApplicationError as error:
        return _refused(error, default=EXTENSION_REFUSED)
    if request.htmx:
        return _render_call(request, call_id)
    return HttpResponseRedirect(f"/calls/{call_id}/", status=303)


@checks_own_query
@require_GET
@login_required
def history(request: HtmxHttpRequest) -> HttpResponse:
    _user(request)
    try:
        query = single_values(request.GET, HISTORY_PARAMETERS)
        form = HistoryFilterForm(query)
        paginator = Paginator(history_calls(filters=form.filters()), HISTORY_PAGE_SIZE)
        page = paginator.page(history_page(query.get("page"), pages=paginator.num_pages))
    except BadQuery as bad:
        return query_refused(request, bad.problems)
    context = {"form": form, "page": page, "rows": history_rows(page.object_list)}
    return render(request, _template(request, "approvals/history.html", "results"), context)
