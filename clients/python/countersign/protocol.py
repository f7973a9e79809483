"""The agent API without I/O, shared by ``Client`` and ``AsyncClient`` so that both build the
same requests and read answers the same way: request bodies and headers, paths, answers to
call states or exceptions, which statuses mean go, and the retry schedule.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from types import MappingProxyType
from typing import Any, TypeGuard
from urllib.parse import quote

import httpx

from countersign import errors

CallState = dict[str, Any]
# ``gated(context=...)``: the text itself, or a function of the call's arguments returning it.
GatedContext = str | Callable[[Mapping[str, Any]], str] | None

TOKEN = re.compile(r"[!-~]+", re.ASCII)  # visible ASCII, as a header value must be

FINAL_STATUSES = frozenset({"allowed", "refused", "approved", "denied", "expired", "cancelled"})
GO_STATUSES = frozenset({"allowed", "approved"})

URL_VARIABLE = "COUNTERSIGN_URL"
TOKEN_VARIABLE = "COUNTERSIGN_TOKEN"  # noqa: S105 - the variable's name, not a token

CALLS_PATH = "/api/v1/calls"
SOCKET_PATH = "/ws/v1/calls/{call_id}"
PAGE_PATH = "/calls/{call_id}/"  # the approver's page of the call
SOCKET_SCHEMES = {"http": "ws", "https": "wss"}

# Worth another try: the service, or a proxy in front of it, is restarting or overloaded.
RETRY_STATUSES = frozenset({502, 503, 504})
ATTEMPTS = 4  # a try and three retries, with under two seconds of backoff in all
BACKOFF_BASE = 0.25
BACKOFF_CAP = 4.0
DETAIL_LIMIT = 300

_ERRORS: dict[int, tuple[type[errors.CountersignError], str]] = {
    400: (errors.BadRequest, errors.BAD_REQUEST),
    401: (errors.Unauthorized, errors.UNAUTHORIZED),
    403: (errors.Forbidden, errors.FORBIDDEN),
    404: (errors.NotFound, errors.NOT_FOUND),
    409: (errors.Conflict, errors.CONFLICT),
    413: (errors.TooLarge, errors.TOO_LARGE),
}


def _configured(value: str | None, *, variable: str, what: str, argument: str) -> str:
    """``value`` if given, else the environment's ``variable``; neither is a ``ValueError``
    naming both (an empty variable counts as unset)."""
    if value is not None:
        return value
    found = os.environ.get(variable, "")
    if not found:
        raise ValueError(
            errors.MISSING_SETTING.format(what=what, argument=argument, variable=variable)
        )
    return found


def configured_url(url: str | None) -> str:
    """The service's URL: the argument, else ``COUNTERSIGN_URL``."""
    return _configured(url, variable=URL_VARIABLE, what="service URL", argument="base_url")


def configured_token(token: str | None) -> str:
    """The agent's token: the argument, else ``COUNTERSIGN_TOKEN``."""
    return _configured(token, variable=TOKEN_VARIABLE, what="agent token", argument="token")


def auth_headers(token: str) -> dict[str, str]:
    """The bearer header; a token that cannot be one (empty, spaces, non-ASCII) is refused
    here, without repeating it, rather than as an odd error from the HTTP layer."""
    if not TOKEN.fullmatch(token):
        raise ValueError(errors.BAD_TOKEN)
    return {"Authorization": f"Bearer {token}"}


def arguments_text(arguments: object) -> str:
    """The arguments as JSON text: a string is taken to be that text already (as a model wrote
    it) and is sent unchanged; anything else is serialised as ``json.dumps`` would, refusing
    NaN and infinities, which are not JSON, with a ``Decimal`` written as a JSON string of its
    exact decimal text (``Decimal("12.34")`` → ``"12.34"``; docs/api.md, "The Python client")."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, allow_nan=False, default=_decimal_text)


def _decimal_text(value: object) -> str:
    """A ``Decimal`` as its exact decimal text in plain notation (``1E-7`` → ``0.0000001``),
    never through ``float``, which makes 0.1 0.1000000000000000055… and drops large amounts'
    digits. A string rather than a number literal, because a JSON reader elsewhere (the
    approver's tools, a log pipeline) may read a number as a float; the service reads an
    amount from either."""
    if not isinstance(value, Decimal):
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    if not value.is_finite():
        raise ValueError(errors.DECIMAL_NOT_FINITE)
    return format(value, "f")


def json_as_written(value: object) -> str:
    """JSON text of ``value`` with each ``Decimal`` written as the number literal it spells
    (``Decimal("12.30")`` → ``12.30``): for JSON read with ``parse_float=Decimal`` that must go
    on with its numbers as they were written (the Claude Code hook's ``tool_input``). The same
    separators, keys and errors as ``json.dumps`` otherwise."""
    # json has no hook that writes a raw number literal, so containers are walked here.
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(errors.DECIMAL_NOT_FINITE)
        return str(value)  # a finite Decimal's str is a JSON number, digit for digit
    if isinstance(value, dict):
        members = (f"{_key_text(key)}: {json_as_written(item)}" for key, item in value.items())
        return "{" + ", ".join(members) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(json_as_written(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _key_text(key: object) -> str:
    if key is None or isinstance(key, bool | int | float):
        key = json.dumps(key, allow_nan=False)  # as json.dumps writes such a key: "1", "true"
    if not isinstance(key, str):
        raise TypeError(errors.BAD_KEY.format(kind=type(key).__name__))
    return json.dumps(key, ensure_ascii=False)


def _usage_value(value: object) -> object:
    """A cost given as a ``Decimal`` goes as the decimal string the API wants, in plain
    notation (``1E-7`` would be refused as a cost)."""
    return _decimal_text(value) if isinstance(value, Decimal) else value


def edited_arguments(state: CallState) -> dict[str, Any] | None:
    """The arguments an approver edited the call to (``edited`` in its state),
    read as an object with numbers as ``Decimal``; None when the call was not edited.
    ``EditDoesNotFit`` when they are not a JSON object: then nothing may run."""
    if state.get("edited") is not True:
        return None
    try:
        edited = json.loads(state["arguments"], parse_float=Decimal)
    except (KeyError, TypeError, ValueError):
        edited = None
    if not isinstance(edited, dict):
        cause = errors.EDIT_NOT_AN_OBJECT
        message = errors.BAD_EDIT + errors.EDIT_STAYS_COUNTED
        raise errors.EditDoesNotFit(message, cause=cause, call_id=_state_id(state))
    return edited


def _state_id(state: CallState) -> str:
    return str(state.get("id", ""))


def _unfit(cause: str, *, call_id: str) -> errors.EditDoesNotFit:
    """An edit the function cannot be called with, naming what does not fit."""
    message = (
        errors.EDIT_DOES_NOT_FIT + errors.EDIT_CAUSE.format(cause=cause) + errors.EDIT_STAYS_COUNTED
    )
    return errors.EditDoesNotFit(message, cause=cause, call_id=call_id)


def gated_context(context: GatedContext, arguments: Mapping[str, Any]) -> str | None:
    """The context a gated call is submitted with: ``context`` itself if it is text, else
    what it returns for the call's arguments (name → value, as submitted; read-only). Anything
    but text from it is a ``TypeError``, raised before anything is submitted."""
    if context is None or isinstance(context, str):
        return context
    text = context(MappingProxyType(arguments))
    if not isinstance(text, str):
        raise TypeError(errors.BAD_CONTEXT)
    return text


def submit_body(
    tool: str,
    arguments: object,
    *,
    principal: str | None = None,
    run_id: str | None = None,
    context: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> bytes:
    """The ``POST /api/v1/calls`` body, serialised once: a retry must send the very same bytes,
    or the service takes the reused Idempotency-Key for another request (409)."""
    body: dict[str, Any] = {"tool": tool, "arguments": arguments_text(arguments)}
    optional = {
        "principal": principal,
        "run_id": run_id,
        "context": context,
        "usage": None
        if usage is None
        else {name: _usage_value(value) for name, value in usage.items()},
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode()


def submit_headers(token_headers: Mapping[str, str], idempotency_key: str | None) -> dict[str, str]:
    """Headers for one submit, with its Idempotency-Key (a fresh one unless given): the key is
    fixed before the first attempt so that every retry of this submit carries it."""
    return {
        **token_headers,
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key or str(uuid.uuid4()),
    }


def call_id(state_or_id: CallState | str) -> str:
    return state_or_id if isinstance(state_or_id, str) else str(state_or_id["id"])


def call_path(state_or_id: CallState | str, suffix: str = "") -> str:
    return f"{CALLS_PATH}/{quote(call_id(state_or_id), safe='')}{suffix}"


def base_url(url: str) -> str:
    """The service's address without a trailing slash; only ``http`` and ``https`` will do."""
    scheme, _, _ = url.partition("://")
    if scheme.lower() not in SOCKET_SCHEMES:
        raise ValueError(errors.BAD_URL)
    return url.rstrip("/")


def socket_url(base: str, state_or_id: CallState | str) -> str:
    """The call's WebSocket URL on the service's host (``http`` → ``ws``, ``https`` → ``wss``)."""
    scheme, _, rest = base.partition("://")
    path = SOCKET_PATH.format(call_id=quote(call_id(state_or_id), safe=""))
    return f"{SOCKET_SCHEMES[scheme.lower()]}://{rest}{path}"


def page_url(base: str, state_or_id: CallState | str) -> str:
    """The call's page, where an approver decides it, on the service's host."""
    return base + PAGE_PATH.format(call_id=quote(call_id(state_or_id), safe=""))


def is_final(state_or_id: CallState | str) -> TypeGuard[CallState]:
    return not isinstance(state_or_id, str) and state_or_id.get("status") in FINAL_STATUSES


def backoff(failures: int) -> float:
    """Seconds to pause after ``failures`` failures in a row: doubling up to a cap, half of it
    random so that agents cut off together do not all come back in the same instant."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** max(failures - 1, 0))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not secrecy


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delay-seconds or an HTTP date; None if absent or invalid."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - datetime.now(UTC)).total_seconds(), 0.0)


def unavailable(detail: str, says: str = "", *, code: str = "") -> errors.ServiceUnavailable:
    """``ServiceUnavailable`` naming what failed (an exception's class, an HTTP status)."""
    return errors.ServiceUnavailable(
        errors.SERVICE_UNAVAILABLE.format(detail=detail) + says, code=code
    )


def _error_body(response: httpx.Response) -> tuple[str, str]:
    """The service's error code and message, or empty strings (e.g. a proxy's HTML page)."""
    try:
        error = response.json()["error"]
        return str(error.get("code", "")), str(error.get("message", ""))[:DETAIL_LIMIT]
    except (ValueError, TypeError, KeyError, AttributeError):
        return "", ""


def error_for(response: httpx.Response) -> errors.CountersignError:
    """The exception for an error answer. The service's own message is added: it never repeats
    what the agent sent, and it says which field or which rule is at fault."""
    code, detail = _error_body(response)
    status = response.status_code
    says = errors.SERVICE_SAYS.format(detail=detail) if detail else ""
    if status == 429:
        after = retry_after(response.headers.get("Retry-After"))
        wait = "a moment" if after is None else f"{after:g} seconds"
        message = errors.RATE_LIMITED.format(wait=wait) + says
        return errors.RateLimited(message, code=code, retry_after=after)
    if status in _ERRORS:
        kind, message = _ERRORS[status]
        return kind(message + says, code=code)
    if status >= 500:
        return unavailable(f"HTTP {status}", says, code=code)
    return errors.CountersignError(errors.UNEXPECTED_STATUS.format(status=status) + says, code=code)


def state_from(response: httpx.Response) -> CallState:
    """The call state in a successful answer; otherwise raises the matching error."""
    if not response.is_success:
        raise error_for(response)
    try:
        state = response.json()
    except ValueError:
        state = None
    if not isinstance(state, dict) or not isinstance(state.get("status"), str) or "id" not in state:
        raise unavailable(errors.NOT_A_STATE)
    return state


def raise_unless_go(state: CallState) -> CallState:
    """The final state if it means go; else ``Denied`` carrying it."""
    if state["status"] not in GO_STATUSES:
        raise errors.Denied(state)
    return state


def gated_call(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any], state: CallState
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What a gated function runs with once its call is allowed or approved: its own call,
    or, when the approver edited the arguments, the edited ones (``edited_call``)."""
    edited = edited_arguments(state)
    if edited is None:
        return args, kwargs
    return edited_call(signature, edited, call_id=_state_id(state))


def edited_call(
    signature: inspect.Signature, edited: Mapping[str, Any], *, call_id: str = ""
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A gated function's call from edited tool arguments, the inverse of
    ``bound_arguments``: each member to the parameter of its name (positionally while every
    earlier positional parameter is given), a ``*args`` member's list spread, members no
    parameter is named for to ``**kwargs``; a parameter the edit leaves out takes its
    default. An edit the signature cannot take is ``EditDoesNotFit``: nothing may run."""
    rest = dict(edited)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True
    for name, parameter in signature.parameters.items():
        kind = parameter.kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            continue
        if kind is inspect.Parameter.VAR_POSITIONAL:
            spread = rest.pop(name, [])
            if not isinstance(spread, list):
                raise _unfit(errors.EDIT_SPREAD_NOT_A_LIST.format(name=name), call_id=call_id)
            if spread and not positional:
                cause = errors.EDIT_LEFT_OUT_BEFORE.format(name=name)
                raise _unfit(cause, call_id=call_id)
            args.extend(spread)
            positional = False
            continue
        if name not in rest:
            positional = False
            continue
        value = rest.pop(name)
        if kind is inspect.Parameter.KEYWORD_ONLY or (
            not positional and kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            kwargs[name] = value
        elif positional:
            args.append(value)
        else:  # a positional-only parameter after one the edit left out
            raise _unfit(errors.EDIT_LEFT_OUT_BEFORE.format(name=name), call_id=call_id)
    kwargs.update(rest)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as unbound:  # its message names the parameter or member at fault
        raise _unfit(str(unbound), call_id=call_id) from None
    return tuple(args), kwargs


def bound_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A gated function's call as tool arguments: parameter name → value, defaults included
    (the reviewer sees what will run), ``**kwargs`` merged in. A call that does not fit the
    signature raises ``TypeError`` here, before anything is submitted."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[name] = value
    return arguments
