"""What can go wrong for an agent, as exceptions that say what to do next.

Every one of them is a ``NotApproved`` and means the same thing for the agent: the call is not
approved, so the tool must not run. ``Denied`` is the service's answer (refused by policy,
denied by a reviewer, expired or cancelled); ``TimedOut`` is the agent giving up at its
deadline (having cancelled the call); the others are failures to get an answer at all.
Messages never repeat the call's arguments: they end up in logs and in a model's context.
"""

from __future__ import annotations

from typing import Any

UNAUTHORIZED = (
    "The service did not accept the token (401): check the token; it may be mistyped, "
    "revoked, or meant for another server."
)
FORBIDDEN = (
    "The service refused this agent (403): the agent is disabled, or it may not act for that "
    "principal; ask the service's administrator."
)
NOT_FOUND = (
    "No such call for this agent (404): check the call id; an agent sees only its own calls."
)
CONFLICT = (
    "The service refused a repeat (409): an Idempotency-Key was reused with another body, or "
    "the call is already final; use a new key, or read the call's state."
)
TOO_LARGE = "The request is too large (413): shrink the arguments or the context."
RATE_LIMITED = "Too many requests (429): wait {wait} before trying again."
BAD_REQUEST = "The service rejected the request as malformed (400): fix the request."
UNEXPECTED_STATUS = "The service answered HTTP {status}: the call is not approved; do not run it."
SERVICE_UNAVAILABLE = (
    "The approval service could not be reached or failed ({detail}): the call is not approved; "
    "do not run it, and try again later."
)
# What could not be reached, so that a wrong port or host shows at once; the URL is the
# service's base URL without any user:password in it (the token is never in a URL).
UNREACHABLE = "{kind} at {url}"
NOT_ASYNC = "AsyncClient.gated wraps async def functions; use Client.gated for plain ones."
BAD_TOKEN = "The token must be visible ASCII characters without spaces: check the token."  # noqa: S105
BAD_URL = "The service URL must start with http:// or https://."
DECIMAL_NOT_FINITE = (
    "A Decimal that is NaN or infinite is not an amount: nothing was submitted; "
    "send a finite amount."
)
BAD_EDIT = "The approver's edited arguments are not a JSON object: the tool must not run."
EDIT_DOES_NOT_FIT = (
    "The approver's edited arguments do not fit the function's parameters: the tool must not run."
)
EDIT_CAUSE = " Cause: {cause}."
# The service approved the edit: its ledgers counted the edited amounts before the client saw
# that the function cannot take them.
EDIT_STAYS_COUNTED = (
    " The call stays approved and its amounts stay counted in the ledgers; ask an admin to void "
    "them (Approvals › Ledger entries) if the tool is not run another way."
)
EDIT_NOT_AN_OBJECT = "not a JSON object"
EDIT_SPREAD_NOT_A_LIST = "{name} is not a list"
EDIT_LEFT_OUT_BEFORE = "{name} is passed by position, but a parameter before it was left out"
BAD_KEY = "keys must be str, int, float, bool or None, not {kind}"
BAD_CONTEXT = (
    "gated(context=...) is a string or a function of the call's arguments that returns one; "
    "it returned something else, so nothing was submitted."
)
SERVICE_SAYS = " The service says: {detail}"
NOT_A_STATE = "the answer is not a call state"
DEADLINE_PASSED = (
    "No decision before the deadline: the call is still pending on the service; "
    "wait for it again, or cancel it."
)
DEADLINE_CANCELLED = (
    "No decision within {seconds:g} seconds, so the agent stopped waiting and cancelled the "
    "call: no one can approve it now. Do not run the tool; submit it again if it is still needed."
)
DEADLINE_NOT_CANCELLED = (
    "No decision within {seconds:g} seconds, so the agent stopped waiting, but the call could "
    "not be cancelled ({detail}): it may still be decided on the service. Do not run the tool."
)
# A wait that gives up on a service it lost (``Client(reconnect_for=...)``) says how long.
LOST_WHILE_WAITING = "no answer for {seconds:g} seconds while waiting"
MISSING_SETTING = (
    "No {what} for Countersign: pass {argument}=... or set the {variable} environment variable."
)

DENIED = "The call was {status}: do not run the tool; {advice}"
DENIED_ADVICE = {
    "refused": "the policy refuses it, so change the call rather than retry it unchanged.",
    "denied": "a reviewer denied it, so do not retry it unchanged.",
    "expired": "no one decided in time; submit it again only if it is still needed.",
    "cancelled": "it was withdrawn.",
}
DENIED_COMMENT = " Comment: {comment}"


class NotApproved(Exception):
    """The call is not approved: do not run the tool. The base of every exception the client
    raises for a call; ``code`` is the service's machine code, when it sent one."""

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


# The base's name before 0.2, kept so that ``except CountersignError`` goes on working.
CountersignError = NotApproved


class BadRequest(NotApproved):
    """400: the request is malformed (the service's message says which part)."""


class Unauthorized(NotApproved):
    """401: the token is missing, unknown or revoked."""


class Forbidden(NotApproved):
    """403: the agent is disabled, or it may not act for the principal it named."""


class NotFound(NotApproved):
    """404: no such call among this agent's calls."""


class Conflict(NotApproved):
    """409: an Idempotency-Key reused with another body, or a cancel of a final call."""


class TooLarge(NotApproved):
    """413: the body is over the service's limit."""


class RateLimited(NotApproved):
    """429: too many requests; ``retry_after`` is the service's advice in seconds, if any."""

    def __init__(self, message: str, *, code: str = "", retry_after: float | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class ServiceUnavailable(NotApproved):
    """The service could not be reached, or failed, even after retrying."""


class Denied(NotApproved):
    """The service's answer is no: ``status`` is ``refused``, ``denied``, ``expired`` or
    ``cancelled``; ``comment`` is the decision's comment (for ``refused``, which nobody
    decided, the policy's reasons); ``state`` is the whole final call state."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.status: str = state["status"]
        self.reasons: list[dict[str, Any]] = list(state.get("reasons") or [])
        decision = state.get("decision")
        reasons = "; ".join(str(reason.get("message", "")) for reason in self.reasons)
        self.comment: str = (decision.get("comment") or "") if decision else reasons
        message = DENIED.format(status=self.status, advice=DENIED_ADVICE.get(self.status, ""))
        if self.comment:
            message += DENIED_COMMENT.format(comment=self.comment)
        super().__init__(message)


class EditDoesNotFit(NotApproved, ValueError):
    """The approver approved the call with edited arguments that the gated function cannot be
    called with: it does not run. ``cause`` names what does not fit; ``call_id`` is the call's
    id. A ``ValueError`` too, for code that already catches one."""

    def __init__(self, message: str, *, cause: str, call_id: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.call_id = call_id


class TimedOut(NotApproved, TimeoutError):
    """The agent's deadline passed before a decision. ``cancelled`` says whether the client
    cancelled the call on the way out (so nobody can approve it any more); ``call_id`` is the
    call's id. A ``TimeoutError`` too, for code that already catches one."""

    def __init__(self, message: str, *, call_id: str, cancelled: bool) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.cancelled = cancelled
