"""Verifying Countersign's receipts where a tool runs (docs/receipts.md).

A receipt is a compact JWS (``EdDSA``, an Ed25519 key) that Countersign signs when a call ends
``allowed`` or ``approved``. It binds the exact arguments the tool may run with, the tool's
name, the call and the people who approved it. ``verify_receipt`` checks one against
Countersign's published keys, and ``requires_receipt`` refuses to run a tool's code without a
valid one for its own name and arguments. Signatures go through ``joserfc``: nothing here
verifies a signature by hand, and no algorithm but ``EdDSA`` is ever tried.

Messages never repeat what a receipt or the arguments say: a forged receipt is someone
else's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import heapq
import inspect
import json
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ParamSpec, TypeVar, overload

import httpx
from joserfc import jws
from joserfc.errors import JoseError, UnsupportedAlgorithmError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import OKPKey
from joserfc.jws import JWSRegistry

from countersign import errors, protocol

P = ParamSpec("P")
R = TypeVar("R")

ALGORITHM = "EdDSA"
CURVE = "Ed25519"
RECEIPT_TYPE = "countersign-receipt+jwt"
# Where the MCP gateway puts the receipt in the upstream's ``tools/call`` (its ``_meta``).
RECEIPT_META_KEY = "dev.countersign/receipt"
JWKS_PATH = "/.well-known/jwks.json"
HEADER_NAMES = frozenset({"alg", "typ", "kid"})
GO_STATUSES = frozenset({"allowed", "approved"})
# Receipts carry the arguments whole: room for a call the service took at its largest
# default body, however its text was escaped.
MAX_RECEIPT_PAYLOAD = 16 * 1024 * 1024
# Keys fetched from an issuer are kept this long; a receipt naming a key not among them
# fetches them again, at most this often (a rotation reaches a verifier within a minute).
JWKS_MAX_AGE = 300.0
JWKS_REFETCH_AFTER = 30.0
# Keys already fetched still verify this long while the issuer cannot be reached.
JWKS_MAX_STALE = 3600.0
JWKS_TIMEOUT = 10.0

MISSING = "No Countersign receipt came with this call: the tool must not run."
MALFORMED = "The Countersign receipt is malformed ({what}): the tool must not run."
BAD_ALGORITHM = (
    "The Countersign receipt is not signed with EdDSA, the only algorithm accepted: "
    "the tool must not run."
)
BAD_SIGNATURE = "The Countersign receipt's signature does not verify: the tool must not run."
UNKNOWN_KEY = (
    "The Countersign receipt is signed with a key the issuer does not publish: "
    "the tool must not run."
)
KEYS_UNAVAILABLE = (
    "The issuer's public keys could not be fetched ({detail}): the receipt cannot be "
    "verified, so the tool must not run."
)
KEYS_STALE = (
    "The issuer's public keys fetched earlier are too old to trust and could not be fetched "
    "again: the receipt cannot be verified, so the tool must not run."
)
BAD_JWKS = "The public keys given are not a JWKS with Ed25519 keys: {what}."
WRONG_ISSUER = "The Countersign receipt was issued by another service: the tool must not run."
EXPIRED = "The Countersign receipt has expired: the tool must not run; submit the call again."
WRONG_TOOL = "The Countersign receipt is for another tool: the tool must not run."
WRONG_ARGUMENTS = (
    "The Countersign receipt is for other arguments than these: the tool must not run with them."
)
REPLAYED = "The Countersign receipt has been used already: the tool must not run again."
NOT_ARGUMENTS = "arguments are the JSON text or a mapping of them, not {kind}"
NO_VERIFIER = (
    "No issuer and no keys to verify receipts with: pass issuer=... (the service's "
    "COUNTERSIGN_PUBLIC_URL) or jwks=..., or set COUNTERSIGN_URL."
)


class ReceiptInvalid(errors.NotApproved):
    """The receipt does not let this tool run with these arguments: the tool must not run.
    Each reason is a subclass."""


class ReceiptMissing(ReceiptInvalid):
    """No receipt came with the call."""


class ReceiptMalformed(ReceiptInvalid):
    """Not a compact JWS of a Countersign receipt with every claim in its place."""


class ReceiptBadSignature(ReceiptInvalid):
    """Not signed with ``EdDSA``, or the signature does not verify."""


class ReceiptUnknownKey(ReceiptInvalid):
    """Signed with a key the issuer does not publish (or whose keys could not be fetched)."""


class ReceiptExpired(ReceiptInvalid):
    """Past its ``exp``: the call must be submitted again."""


class ReceiptWrongIssuer(ReceiptInvalid):
    """Issued by another service than the one expected."""


class ReceiptWrongTool(ReceiptInvalid):
    """Issued for another tool."""


class ReceiptWrongArguments(ReceiptInvalid):
    """Issued for other arguments than the ones the tool is about to run with."""


class ReceiptReplayed(ReceiptInvalid):
    """Its ``jti`` was seen before by the replay guard."""


class _EdDSAOnly(JWSRegistry):
    """joserfc's registry narrowed to ``EdDSA``: a header asking for anything else is refused
    before any key is used. (RFC 9864 prefers the name ``Ed25519``, and joserfc warns about
    ``EdDSA`` on every use; receipts are RFC 8037's ``EdDSA`` with Ed25519 keys.)"""

    max_payload_length = MAX_RECEIPT_PAYLOAD

    def get_alg(self, name: str) -> JWSAlgModel:
        if name != ALGORITHM:
            raise UnsupportedAlgorithmError(f"only {ALGORITHM} is accepted")
        return self.algorithms[ALGORITHM]


_EDDSA_ONLY = _EdDSAOnly(algorithms=[ALGORITHM])


# --- Keys ---------------------------------------------------------------------------------


def _jwks_keys(document: object) -> dict[str, OKPKey]:
    """The Ed25519 signing keys of a JWKS document, by ``kid``; a key of another kind, or
    for another use or algorithm, is left out."""
    if isinstance(document, str | bytes):
        try:
            document = json.loads(document)
        except ValueError:
            raise ValueError(BAD_JWKS.format(what="not JSON")) from None
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise ValueError(BAD_JWKS.format(what='no "keys" list'))
    found: dict[str, OKPKey] = {}
    for entry in document["keys"]:
        if not isinstance(entry, Mapping) or entry.get("kty") != "OKP":
            continue
        if entry.get("crv") != CURVE or entry.get("alg", ALGORITHM) != ALGORITHM:
            continue
        if entry.get("use", "sig") != "sig" or "d" in entry:
            continue
        try:
            key = OKPKey.import_key({"kty": "OKP", "crv": CURVE, "x": entry["x"]})
        except (JoseError, KeyError, TypeError, ValueError):
            continue
        kid = entry.get("kid")
        found[kid if isinstance(kid, str) else key.thumbprint()] = key
    return found


@dataclass(slots=True)
class _Fetched:
    """An issuer's keys, when they were fetched, when a fetch was last tried, and why that
    fetch failed (None: it did not)."""

    keys: dict[str, OKPKey]
    at: float
    tried: float
    failure: str | None = None


class _IssuerKeys:
    """The keys fetched from each issuer's ``/.well-known/jwks.json``, shared by every
    verification in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fetched: dict[str, _Fetched] = {}

    def clear(self) -> None:
        with self._lock:
            self._fetched.clear()

    def key(self, issuer: str, kid: str) -> OKPKey:
        now = time.monotonic()
        with self._lock:
            known = self._fetched.get(issuer)
        if known is not None and kid in known.keys and now - known.at < JWKS_MAX_AGE:
            return known.keys[kid]
        if known is not None and now - known.tried < JWKS_REFETCH_AFTER:
            return _stale(known, kid, now)
        try:
            fresh = _jwks_keys(_fetch_jwks(issuer))
        except (httpx.HTTPError, ValueError) as error:
            failure = KEYS_UNAVAILABLE.format(detail=type(error).__name__)
            if known is None:
                raise ReceiptUnknownKey(failure) from None
            with self._lock:
                known.tried, known.failure = now, failure
            return _stale(known, kid, now)
        with self._lock:
            self._fetched[issuer] = _Fetched(fresh, now, now)
        if kid not in fresh:
            raise ReceiptUnknownKey(UNKNOWN_KEY)
        return fresh[kid]


def _stale(known: _Fetched, kid: str, now: float) -> OKPKey:
    """A key fetched earlier, while the issuer cannot be asked again (it failed, or was asked
    moments ago): kept for an hour at most, so that a key withdrawn from the published set
    stops verifying within that time even when the issuer is kept out of reach."""
    if kid not in known.keys:
        raise ReceiptUnknownKey(known.failure or UNKNOWN_KEY)
    if now - known.at >= JWKS_MAX_STALE:
        raise ReceiptUnknownKey(known.failure or KEYS_STALE)
    return known.keys[kid]


def _fetch_jwks(issuer: str) -> object:
    response = httpx.get(issuer + JWKS_PATH, timeout=JWKS_TIMEOUT, follow_redirects=False)
    response.raise_for_status()
    return response.json()


_ISSUER_KEYS = _IssuerKeys()


def jwks_cache_clear() -> None:
    """Forget the keys fetched from issuers: the next verification fetches them again."""
    _ISSUER_KEYS.clear()


# --- Replays --------------------------------------------------------------------------------


class ReplayGuard:
    """Remembers each receipt's ``jti`` until its ``exp``, in this process's memory, so that a
    receipt runs its tool once. Several processes serving one tool need a shared store:
    subclass and override ``first_use`` (e.g. Redis ``SET jti 1 NX EXAT exp``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._expiries: list[tuple[int, str]] = []

    def first_use(self, jti: str, *, expires_at: int) -> bool:
        """True the first time ``jti`` is shown before ``expires_at`` (Unix seconds), and it is
        remembered until then; False every later time."""
        now = time.time()
        with self._lock:
            while self._expiries and self._expiries[0][0] <= now:
                _, gone = heapq.heappop(self._expiries)
                self._seen.pop(gone, None)
            if jti in self._seen:
                return False
            self._seen[jti] = expires_at
            heapq.heappush(self._expiries, (expires_at, jti))
            return True


# --- Arguments ------------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a name is given twice")
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _strict(text: str, *, exact: bool) -> Any:
    """JSON read strictly: a name given twice or NaN/Infinity refused; with ``exact``, every
    number a ``Decimal`` spelling it exactly."""
    numbers: dict[str, Any] = {"parse_float": Decimal, "parse_int": Decimal} if exact else {}
    return json.loads(
        text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, **numbers
    )


def _number(value: object) -> Decimal | None:
    """A number given to a tool as the exact decimal it spells; None for anything else. A
    float is read by its shortest spelling (``0.1``, not 0.1000000000000000055…): it is what
    a JSON reader made of the text ``0.1``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    return None


def _decimal_text(text: str) -> Decimal | None:
    """A string that spells a JSON number, as the decimal it spells (the client sends a
    ``Decimal`` amount as such a string); None otherwise."""
    try:
        parsed = _strict(text, exact=True)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, Decimal) else None


def same_arguments(approved: object, given: object) -> bool:
    """Whether ``given`` (what the tool is about to run with) is ``approved`` (the receipt's
    arguments, read strictly with numbers as ``Decimal``): the same names and values, numbers
    compared as exact decimals (``1250.00`` is ``1250.0``, never ``1250.001``); a number
    given for a string that spells it exactly counts as that number."""
    if given is None or isinstance(given, bool):
        return approved is given
    if isinstance(given, str):
        return isinstance(approved, str) and approved == given
    number = _number(given)
    if number is not None:
        if isinstance(approved, str):
            spelled = _decimal_text(approved)
            return spelled is not None and spelled == number
        return isinstance(approved, Decimal) and approved == number
    if isinstance(given, Mapping):
        return (
            isinstance(approved, dict)
            and all(isinstance(name, str) for name in given)
            and approved.keys() == given.keys()
            and all(same_arguments(approved[name], given[name]) for name in approved)
        )
    if isinstance(given, list | tuple):
        return (
            isinstance(approved, list)
            and len(approved) == len(given)
            and all(same_arguments(a, g) for a, g in zip(approved, given, strict=True))
        )
    return False


# --- Verifying ------------------------------------------------------------------------------

_CLAIM_TYPES: dict[str, type | tuple[type, ...]] = {
    "iss": str,
    "sub": str,
    "jti": str,
    "iat": int,
    "exp": int,
    "agent": str,
    "principal": str,
    "run_id": str,
    "tool": str,
    "arguments": str,
    "arguments_sha256": str,
    "status": str,
    "approvals": list,
    "amounts": list,
    "edited": bool,
}


def _claims_checked(payload: bytes) -> dict[str, Any]:
    try:
        claims = _strict(payload.decode("utf-8"), exact=False)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ReceiptMalformed(MALFORMED.format(what="its claims are not JSON")) from None
    if not isinstance(claims, dict):
        raise ReceiptMalformed(MALFORMED.format(what="its claims are not an object"))
    for name, kind in _CLAIM_TYPES.items():
        value = claims.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ReceiptMalformed(MALFORMED.format(what=f"the claim {name} is missing or wrong"))
    if claims["status"] not in GO_STATUSES or claims["sub"] != claims["jti"]:
        raise ReceiptMalformed(MALFORMED.format(what="it is not an allowed or approved call's"))
    digest = hashlib.sha256(claims["arguments"].encode("utf-8")).hexdigest()
    if digest != claims["arguments_sha256"]:
        raise ReceiptMalformed(MALFORMED.format(what="its arguments and their digest differ"))
    return claims


def _header(receipt: str) -> dict[str, Any]:
    """The receipt's protected header (not yet verified), checked."""
    if not isinstance(receipt, str) or receipt.count(".") != 2:
        raise ReceiptMalformed(MALFORMED.format(what="not a compact JWS"))
    try:
        compact = jws.extract_compact(receipt.encode("ascii"), registry=_EDDSA_ONLY)
        header = dict(compact.headers())
    except (JoseError, ValueError, TypeError):
        raise ReceiptMalformed(MALFORMED.format(what="not a compact JWS")) from None
    if header.get("alg") != ALGORITHM:
        raise ReceiptBadSignature(BAD_ALGORITHM)
    if header.get("typ") != RECEIPT_TYPE or set(header) != HEADER_NAMES:
        raise ReceiptMalformed(MALFORMED.format(what="not a Countersign receipt's header"))
    if not isinstance(header["kid"], str):
        raise ReceiptMalformed(MALFORMED.format(what="its key id is not text"))
    return header


def _issuer(issuer: str | None, jwks: object) -> str | None:
    if issuer is None and jwks is None:
        issuer = os.environ.get(protocol.URL_VARIABLE) or None
        if issuer is None:
            raise ValueError(NO_VERIFIER)
    return None if issuer is None else protocol.base_url(issuer)


def verify_receipt(
    receipt: str | None,
    *,
    tool: str,
    arguments: str | bytes | Mapping[str, Any],
    issuer: str | None = None,
    jwks: Mapping[str, Any] | str | None = None,
    replay_guard: ReplayGuard | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The receipt's claims when it lets ``tool`` run with ``arguments``; otherwise a
    ``ReceiptInvalid`` subclass naming why, and nothing else happens.

    ``arguments``: the exact JSON text the tool runs with (compared by its SHA-256), or the
    parsed arguments (compared with the receipt's text read strictly, numbers as exact
    decimals). ``issuer``: the service's ``COUNTERSIGN_PUBLIC_URL``; the receipt's ``iss``
    must be it, and its keys are fetched from ``issuer/.well-known/jwks.json`` and cached.
    ``jwks``: the keys themselves (a JWKS document), for verifying offline; with ``jwks``
    and no ``issuer`` the issuer is not checked. Neither given: ``COUNTERSIGN_URL`` is the
    issuer. ``replay_guard``: refuses a receipt whose ``jti`` it has seen before its ``exp``
    (checked last, so a receipt refused for another reason is not used up). ``now``: Unix
    seconds to judge ``exp`` by, for tests; the clock otherwise."""
    if receipt is None or receipt == "":
        raise ReceiptMissing(MISSING)
    expected_issuer = _issuer(issuer, jwks)
    header = _header(receipt)
    if jwks is not None:
        key = _jwks_keys(jwks).get(header["kid"])
        if key is None:
            raise ReceiptUnknownKey(UNKNOWN_KEY)
    else:
        assert expected_issuer is not None
        key = _ISSUER_KEYS.key(expected_issuer, header["kid"])
    try:
        verified = jws.deserialize_compact(receipt, key, registry=_EDDSA_ONLY)
    except (JoseError, ValueError, TypeError):
        raise ReceiptBadSignature(BAD_SIGNATURE) from None
    claims = _claims_checked(verified.payload)
    if expected_issuer is not None and claims["iss"].rstrip("/") != expected_issuer:
        raise ReceiptWrongIssuer(WRONG_ISSUER)
    if claims["exp"] <= (time.time() if now is None else now):
        raise ReceiptExpired(EXPIRED)
    if claims["tool"] != tool:
        raise ReceiptWrongTool(WRONG_TOOL)
    if not _arguments_match(claims, arguments):
        raise ReceiptWrongArguments(WRONG_ARGUMENTS)
    if replay_guard is not None and not replay_guard.first_use(
        claims["jti"], expires_at=claims["exp"]
    ):
        raise ReceiptReplayed(REPLAYED)
    return claims


def _arguments_match(claims: Mapping[str, Any], arguments: object) -> bool:
    if isinstance(arguments, str):
        arguments = arguments.encode("utf-8")
    if isinstance(arguments, bytes):
        return bool(hashlib.sha256(arguments).hexdigest() == claims["arguments_sha256"])
    if not isinstance(arguments, Mapping):
        raise TypeError(NOT_ARGUMENTS.format(kind=type(arguments).__name__))
    try:
        approved = _strict(claims["arguments"], exact=True)
    except (ValueError, RecursionError):
        return False
    return same_arguments(approved, arguments)


# --- Where the tool runs --------------------------------------------------------------------

_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "countersign_receipt", default=None
)


def current_receipt() -> str | None:
    """The receipt of the call whose tool is running now: set by ``Client.gated``, the
    framework adapters and ``requires_receipt`` around the tool's code, for handing on to a
    service that verifies it itself (a payment API); None outside one."""
    return _RUNNING.get()


@contextlib.contextmanager
def receipt_context(receipt: str | None) -> Iterator[None]:
    """Run the code inside with ``receipt`` as ``current_receipt()``: how code that got a
    receipt some other way (a request header, a queue message) hands it to a function under
    ``requires_receipt``."""
    token = _RUNNING.set(receipt)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def _mcp_call(value: object) -> tuple[str | None, Mapping[str, Any]] | None:
    """The receipt in an MCP ``tools/call``'s ``_meta`` and the arguments as the request
    carried them, when ``value`` is the MCP SDK's tool ``Context`` (known by its shape: the
    client does not need the SDK); None for any other value."""
    try:
        request = getattr(value, "request_context", None)
    except ValueError:  # a Context outside a request
        return None
    params = getattr(request, "params", None)
    meta = getattr(request, "meta", None)
    if not isinstance(params, Mapping):
        return None
    if not isinstance(meta, Mapping):
        meta = params.get("_meta")
    receipt = meta.get(RECEIPT_META_KEY) if isinstance(meta, Mapping) else None
    sent = params.get("arguments")
    return (
        receipt if isinstance(receipt, str) else None,
        sent if isinstance(sent, Mapping) else {},
    )


def _receipt_and_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, Mapping[str, Any]]:
    for value in signature.bind_partial(*args, **kwargs).arguments.values():
        found = _mcp_call(value)
        if found is not None:
            return found
    return current_receipt(), protocol.bound_arguments(signature, args, kwargs)


@overload
def requires_receipt(
    function: Callable[P, R],
    /,
    *,
    tool: str | None = None,
    issuer: str | None = None,
    jwks: Mapping[str, Any] | str | None = None,
    replay_guard: ReplayGuard | None = None,
) -> Callable[P, R]: ...


@overload
def requires_receipt(
    *,
    tool: str | None = None,
    issuer: str | None = None,
    jwks: Mapping[str, Any] | str | None = None,
    replay_guard: ReplayGuard | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def requires_receipt(
    function: Callable[P, R] | None = None,
    /,
    *,
    tool: str | None = None,
    issuer: str | None = None,
    jwks: Mapping[str, Any] | str | None = None,
    replay_guard: ReplayGuard | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator for a tool's own code: it runs only with a valid receipt for ``tool`` (by
    default the function's name) and the arguments it is called with; otherwise a
    ``ReceiptInvalid`` is raised and it does not run.

    The receipt is the MCP ``tools/call``'s ``_meta["dev.countersign/receipt"]`` when the
    function takes the MCP SDK's ``Context`` (the arguments compared are then the request's,
    as sent), else ``current_receipt()`` (set by ``Client.gated``, the adapters and
    ``receipt_context``), compared with the function's arguments by parameter name, defaults
    included, as ``gated`` submits them. ``issuer``, ``jwks`` and ``replay_guard`` are
    ``verify_receipt``'s. An ``async def`` function is verified off the event loop (a key
    fetch is blocking I/O). While the function runs, ``current_receipt()`` is the receipt."""

    def decorate(wrapped: Callable[P, R]) -> Callable[P, R]:
        name = tool if tool is not None else wrapped.__name__
        signature = inspect.signature(wrapped)

        def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            receipt, arguments = _receipt_and_arguments(signature, args, kwargs)
            verify_receipt(
                receipt,
                tool=name,
                arguments=arguments,
                issuer=issuer,
                jwks=jwks,
                replay_guard=replay_guard,
            )
            assert receipt is not None
            return receipt

        if inspect.iscoroutinefunction(wrapped):
            run_async: Callable[..., Awaitable[Any]] = wrapped

            @functools.wraps(wrapped)
            async def verified_async(*args: Any, **kwargs: Any) -> Any:
                receipt = await asyncio.to_thread(check, args, kwargs)
                with receipt_context(receipt):
                    return await run_async(*args, **kwargs)

            return verified_async  # type: ignore[return-value]

        @functools.wraps(wrapped)
        def verified(*args: P.args, **kwargs: P.kwargs) -> R:
            receipt = check(args, kwargs)
            with receipt_context(receipt):
                return wrapped(*args, **kwargs)

        return verified

    return decorate if function is None else decorate(function)
