"""Strict JSON for tool arguments.

The value a cap reads, the value an approver sees and the value the tool decodes must be
the same value, so anything a lenient parser would resolve one way and another parser another
way (duplicate names, case-variant names, lone surrogates, NaN, trailing data) is refused.

Two readers, one result. The fast reader: jiter (native code) parses the document once,
without its duplicate-key check (which costs it half again); one walk of the tree, a loop per
level, turns jiter's numbers into ``JSONNumber`` (the exact text: an integer's ``str`` is its
literal, a lossless float keeps its own), counts the levels and gathers the containers. Two
cheap facts then vouch for the names. The objects hold as many members as the text has
colons outside strings: every member has one, and jiter keeps one member per repeated name,
so a duplicate leaves a colon over (the colons inside strings are counted in the tree's
strings, in C, only when the text has more colons than members). And no two distinct names
of the whole document casefold alike, so no two of one object do.

Whatever the fast reader cannot vouch for is read by the hooked reader: the standard
library's C decoder with a hook per object for the names, numbers as ``JSONNumber``. It gives
the reason of a refusal, so both readers accept the same documents with the same values.
Depth and lone surrogates have no hook: the hooked reader walks the parsed tree only when a
cheap scan of the text says they could fail, and the escaped-surrogate scan guards both
readers' values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any, NoReturn

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

# Below this many objects the per-object hook costs less than the fast reader's walk (bench/).
# The tests set it to 0 and to 10**9 to run every case through each reader.
FAST_READER_FROM_OBJECTS = 3


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ArgsNotStrict(DUPLICATE_NAME)
    if len(obj) > 1 and _names_fold_together(obj):
        raise ArgsNotStrict(CASE_VARIANT_NAMES)
    return obj


def _names_fold_together(names: Collection[str]) -> bool:
    """Two of ``names`` (distinct strings) have the same casefold. casefold works code point
    by code point, so when the joined names are already casefolded, none can: the common case
    costs one pass in C."""
    joined = "\x00".join(names)
    return joined.casefold() != joined and len(set(map(str.casefold, names))) != len(names)


def _refuse_constant(_name: str) -> NoReturn:
    raise ArgsNotStrict(NON_FINITE_NUMBER)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object,
    parse_float=JSONNumber,
    parse_int=JSONNumber,
    parse_constant=_refuse_constant,
)

# jiter reads the literal -0 as the integer 0, whose str is "0": a document with a 0 and this
# (also found in strings: "-0" before a delimiter) takes the hooked reader.
_NEGATIVE_ZERO = re.compile(rb"-0(?![.0-9eE])")
# Small non-negative integers are most of the numbers of tool arguments: their JSONNumber is
# made once (str() and JSONNumber() per number cost as much as the rest of the walk).
_SMALL_INTS = tuple(JSONNumber(str(n)) for n in range(1024))
# Longer integers take the hooked reader: str() of a long int costs quadratic time, and
# sys.set_int_max_str_digits can refuse it.
_INT_LIMIT = 10**18


class _Unvouched(Exception):
    """Raised and caught inside the fast reader: the hooked reader must decide."""


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


def _exact_numbers(root: dict[str, object] | list[object]) -> tuple[list[dict[str, object]], bool]:
    """The objects of ``root``, after its numbers were made ``JSONNumber`` in place, and
    whether an integer was 0 (jiter reads ``-0`` as 0).

    One loop per level (no call per container); raises ``_Unvouched`` for more than
    ``MAX_DEPTH`` levels or a long integer.
    """
    objects: list[dict[str, object]] = []
    zeros = False
    level: list[Any] = [root]
    # Locals: a global or an attribute looked up per value is a good part of a step.
    small_ints, small, lossless = _SMALL_INTS, len(_SMALL_INTS), jiter.LosslessFloat
    for _ in range(MAX_DEPTH):
        below: list[Any] = []
        gather = below.append
        for node in level:
            members: Iterable[tuple[Any, Any]]
            if type(node) is dict:
                objects.append(node)
                members = node.items()
            else:
                members = enumerate(node)
            for key, child in members:
                kind = type(child)
                if kind is str:
                    continue
                if kind is dict or kind is list:
                    gather(child)
                elif kind is int:
                    if 0 < child < small:
                        node[key] = small_ints[child]
                    elif child == 0:
                        node[key] = small_ints[0]
                        zeros = True
                    elif -_INT_LIMIT < child < _INT_LIMIT:
                        node[key] = JSONNumber(str(child))
                    else:
                        raise _Unvouched
                elif kind is lossless:
                    node[key] = JSONNumber(str(child))
        if not below:
            return objects, zeros
        level = below
    raise _Unvouched


def _colons_in_strings(raw: bytes) -> int:
    """The colons inside the strings of ``raw``, a valid JSON text. Once the escaped
    backslashes and then the escaped quotes are gone (left to right, pairing them as a parser
    does), every quote delimits a string: every other piece between quotes is one."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(raw.split(b'"')[1::2]).count(b":")


def _read_fast(raw: bytes) -> dict[str, object] | list[object] | None:
    """The value of the UTF-8 document ``raw``, an object or an array; ``None`` when the
    hooked reader must decide (anything else, or anything this reader cannot vouch for)."""
    try:
        value = jiter.from_json(raw, allow_inf_nan=False, float_mode="lossless-float")
    except ValueError:
        return None
    if type(value) is not dict and type(value) is not list:
        return None
    try:
        objects, zeros = _exact_numbers(value)
    except _Unvouched:
        return None
    if zeros and b"-0" in raw and _NEGATIVE_ZERO.search(raw):
        return None
    # One colon per member: a repeated name, which jiter keeps once, leaves one over. Counting
    # the colons inside strings costs a split of the text, so only when there are any.
    members = sum(map(len, objects))
    colons = raw.count(b":")
    if members != colons and members != colons - _colons_in_strings(raw):
        return None
    if _names_fold_together(set().union(*objects)):
        return None
    return value


def _has_objects(raw: bytes, count: int) -> bool:
    """At least ``count`` ``{`` in ``raw`` (searches that stop at the ``count``-th)."""
    at = -1
    for _ in range(count):
        at = raw.find(b"{", at + 1)
        if at < 0:
            return False
    return True


def _read_hooked(text: str) -> object:
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
    # Brackets inside strings count too, so this over-estimates the depth: safe, and cheap.
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(value):
        raise ArgsNotStrict(TOO_DEEP)
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
    raw = data if type(data) is bytes else text.encode()
    value: object = None
    if _has_objects(raw, FAST_READER_FROM_OBJECTS):
        value = _read_fast(raw)
    if value is None:
        value = _read_hooked(text)
    # A correct escaped pair decodes to one code point; a lone escape stays a surrogate.
    # A single-character search first: most documents contain no backslash at all.
    if "\\" in text and _ESCAPED_SURROGATE.search(text) and _has_lone_surrogate(value):
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
