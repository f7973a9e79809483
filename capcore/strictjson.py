"""Strict JSON for tool arguments.

The value a cap reads, the value an approver sees and the value the tool decodes must be
the same value, so anything a lenient parser would resolve one way and another parser another
way (duplicate names, case-variant names, lone surrogates, NaN, trailing data) is refused.

Built on the standard library's C-accelerated decoder with hooks. The two checks it has no
hook for (nesting depth, lone surrogates inside strings) walk the parsed tree only when a
cheap scan of the text says they could fail.

The duplicate and case-variant check is a Python hook called once per object, which is most
of the cost of a document with many objects. For those, jiter (native code) parses the
casefolded text with its duplicate-key check instead: without ``\\u`` escapes, casefolding
changes letters only, so the casefolded document has the same objects, each name becomes its
casefold, and two names fold together exactly when they collide there. The value itself
still comes from the standard decoder, without the hook. Whatever the fast path cannot
vouch for (any failure of either parser, any ``\\u`` escape) is read again by the hooked
path, which gives the reason: both paths accept the same documents with the same values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import NoReturn

import jiter

from capcore.amounts import JSONNumber
from capcore.errors import ArgAbsent, ArgsNotStrict

MAX_DEPTH = 64

NOT_BYTES_OR_STR = "the arguments are neither bytes nor text"
INVALID_UTF8 = "not valid UTF-8"
BYTE_ORDER_MARK = "a byte-order mark"
DUPLICATE_NAME = "a duplicate member name"
CASE_VARIANT_NAMES = "member names that differ only in case"
LONE_SURROGATE = "a lone surrogate"
NON_FINITE_NUMBER = "NaN or Infinity"
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"
TRAILING_DATA = "data after the value"
NOT_JSON = "not JSON"
NOT_AN_OBJECT = "not a JSON object"

_JSON_BLANKS = " \t\n\r"
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ArgsNotStrict(DUPLICATE_NAME)
    if len(obj) > 1:
        # casefold works code point by code point, so when the joined names are already
        # casefolded, no two of them can fold together: the common case costs one pass in C.
        names = "\x00".join(obj)
        if names.casefold() != names and len(set(map(str.casefold, obj))) != len(obj):
            raise ArgsNotStrict(CASE_VARIANT_NAMES)
    return obj


def _refuse_constant(_name: str) -> NoReturn:
    raise ArgsNotStrict(NON_FINITE_NUMBER)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object,
    parse_float=JSONNumber,
    parse_int=JSONNumber,
    parse_constant=_refuse_constant,
)
_UNHOOKED_DECODER = json.JSONDecoder(
    parse_float=JSONNumber, parse_int=JSONNumber, parse_constant=_refuse_constant
)
# Below this many objects the per-object hook costs less than a second parse (bench/).
FOLDED_CHECK_FROM_OBJECTS = 3


def _utf8(data: bytes) -> str | None:
    # UnicodeDecodeError holds the input, so the refusal is raised by the caller, outside
    # this handler, where it cannot be chained to it.
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _leading_blanks(text: str) -> int:
    return len(text) - len(text.lstrip(_JSON_BLANKS))


def _text(data: bytes | str) -> str:
    if type(data) is str:
        if not data.isascii() and _SURROGATE.search(data):
            raise ArgsNotStrict(LONE_SURROGATE)
        text = data
    elif type(data) is bytes:
        decoded = _utf8(data)
        if decoded is None:
            raise ArgsNotStrict(INVALID_UTF8)
        text = decoded
    else:
        raise ArgsNotStrict(NOT_BYTES_OR_STR)
    if text.startswith("\ufeff"):
        raise ArgsNotStrict(BYTE_ORDER_MARK)
    return text


def _decode_folded(text: str) -> object | None:
    """The value, when the fast path can vouch for it; ``None`` when the hooked path must
    decide (a document with objects in it is never ``null``)."""
    value: object
    try:
        jiter.from_json(text.casefold().encode(), catch_duplicate_keys=True, cache_mode="keys")
        value, end = _UNHOOKED_DECODER.raw_decode(text, _leading_blanks(text))
    except (ValueError, RecursionError, ArgsNotStrict):
        return None
    if end != len(text) and text[end:].strip(_JSON_BLANKS):
        return None
    return value


def _decode(text: str) -> object:
    if text.count("{") >= FOLDED_CHECK_FROM_OBJECTS and "\\u" not in text:
        value = _decode_folded(text)
        if value is not None:
            return value
    failure = None
    try:
        value, end = _DECODER.raw_decode(text, _leading_blanks(text))
    except RecursionError:
        failure = TOO_DEEP
    except ValueError:
        # JSONDecodeError keeps the whole document in .doc: never chain it.
        failure = NOT_JSON
    if failure is not None:
        raise ArgsNotStrict(failure)
    if end != len(text) and text[end:].strip(_JSON_BLANKS):
        raise ArgsNotStrict(TRAILING_DATA)
    return value


def _too_deep(value: object) -> bool:
    """More than ``MAX_DEPTH`` containers nested: the containers of each level gathered from
    the one above (a comprehension per level, not a step per value)."""
    if type(value) is not dict and type(value) is not list:
        return False
    level: list[dict[str, object] | list[object]] = [value]
    for _ in range(MAX_DEPTH):
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if type(child) is dict or type(child) is list
        ]
        if not level:
            return False
    return True


def _has_lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if any(_SURROGATE.search(name) for name in node):
                return True
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
        elif type(node) is str and _SURROGATE.search(node):
            return True
    return False


def strict_loads(data: bytes | str) -> object:
    """One strict JSON value; numbers come back as ``JSONNumber``. Raises ``ArgsNotStrict``."""
    text = _text(data)
    value = _decode(text)
    # Brackets inside strings count too, so this over-estimates the depth: safe, and cheap.
    depth = text.count("[") + text.count("{") > MAX_DEPTH
    # A correct escaped pair decodes to one code point; a lone escape stays a surrogate.
    # A single-character search first: most documents contain no backslash at all.
    surrogates = "\\" in text and _ESCAPED_SURROGATE.search(text) is not None
    if depth and _too_deep(value):
        raise ArgsNotStrict(TOO_DEEP)
    if surrogates and _has_lone_surrogate(value):
        raise ArgsNotStrict(LONE_SURROGATE)
    return value


def _is_blank(data: bytes | str) -> bool:
    if isinstance(data, bytes):
        return not data.strip(b" \t\n\r")
    return not data.strip(" \t\n\r")


def parse_arguments(data: bytes | str) -> dict[str, object]:
    """``strict_loads`` that requires an object; empty or blank input is ``{}``."""
    if (type(data) is str or type(data) is bytes) and _is_blank(data):
        return {}
    value = strict_loads(data)
    if type(value) is not dict:
        raise ArgsNotStrict(NOT_AN_OBJECT)
    return value


def lookup(args: bytes | str | dict[str, object], path: Sequence[str]) -> object:
    """The value at ``path`` (member names, outermost first); ``ArgAbsent`` if it is not there.

    A ``dict`` must be ``parse_arguments`` output; text is parsed (strictly) first.
    """
    if not isinstance(path, list | tuple):
        raise TypeError("path must be a list or tuple of member names")
    node: object = args if type(args) is dict else parse_arguments(args)  # type: ignore[arg-type]
    if not path:
        raise ArgAbsent("empty path")
    for name in path:
        if type(node) is not dict or not name or name not in node:
            raise ArgAbsent("no such member")
        node = node[name]
    return node
