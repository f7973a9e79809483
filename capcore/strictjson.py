"""Strict JSON for tool arguments.

The value a cap reads, the value an approver sees and the value the tool decodes must be
the same value, so anything a lenient parser would resolve one way and another parser another
way (duplicate names, case-variant names, lone surrogates, NaN, trailing data) is refused.

Two readers, one result. The fast reader: the standard library's C decoder, numbers as
``JSONNumber`` (their exact text), and one hook per object that only keeps it (the dict is
built in C). Cheap facts then vouch for what no hook checked. The objects hold as many members
as the text has colons outside strings: every member has one, and the decoder keeps one
member per repeated name, so a duplicate leaves a colon over (the colons inside strings are
counted, in C, only when the text has more colons than members). No two distinct names of
the whole document casefold alike, so no two of one object do. And the text's brackets bound
the depth (the tree is walked only when they cannot).

Whatever the fast reader cannot vouch for is read by the hooked reader: the same decoder with
a hook per object for the names, which gives the reason of a refusal, so both readers accept
the same documents with the same values. Depth and lone surrogates have no hook: the hooked
reader walks the parsed tree only when a cheap scan of the text says they could fail, and the
escaped-surrogate scan guards both readers' values.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Sequence
from typing import NoReturn

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

# Below this many objects the names hook costs less than the fast reader's checks (bench/).
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


class _Gathering(threading.local):
    """Per thread: the decoder of the fast reader, whose object hook keeps each object it is
    given in ``objects`` (the reader empties it after each document)."""

    def __init__(self) -> None:
        self.objects: list[dict[str, object]] = []
        keep = self.objects.append

        def kept(obj: dict[str, object]) -> dict[str, object]:
            keep(obj)
            return obj

        self.decoder = json.JSONDecoder(
            object_hook=kept,
            parse_float=JSONNumber,
            parse_int=JSONNumber,
            parse_constant=_refuse_constant,
        )


_GATHERING = _Gathering()
# Every byte but the colons, brackets and braces: deleted, they leave a text's marks in order
# (one pass in C; each count of a mark is then over a short text).
_ALL_BUT_MARKS = bytes(range(256)).translate(None, b"{}[]:")
_ALL_BUT_BRACES = bytes(range(256)).translate(None, b"{}")
_EMPTY_BRACES = re.compile(rb"\{\}")


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


def _colons_in_strings(raw: bytes) -> int:
    """The colons inside the strings of ``raw``, a valid JSON text. Once the escaped
    backslashes and then the escaped quotes are gone (left to right, pairing them as a parser
    does), every quote delimits a string: every other piece between quotes is one."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(raw.split(b'"')[1::2]).count(b":")


def _braces_nest_at_most(marks: bytes, most: int) -> bool:
    """The braces of ``marks`` nest at most ``most`` deep: each pass deletes the pairs that
    were empty before it, one level."""
    braces = marks.translate(None, _ALL_BUT_BRACES)
    for _ in range(most):
        if not braces:
            return True
        braces = _EMPTY_BRACES.sub(b"", braces)
    return not braces


def _depth_within_limit(marks: bytes, objects: int, value: object) -> bool:
    """``value``, read from a text of ``marks`` with ``objects`` objects, nests at most
    ``MAX_DEPTH`` containers deep. A path through the tree has at most as many arrays as the
    text has ``[``, and, when every brace of the text is an object's, at most as many objects
    as the braces nest; only when that bound is over the limit is the tree walked."""
    arrays_at_most = marks.count(b"[")
    opening = marks.count(b"{")
    if arrays_at_most + opening <= MAX_DEPTH:
        return True
    if (
        opening == objects == marks.count(b"}")
        and arrays_at_most < MAX_DEPTH
        and _braces_nest_at_most(marks, MAX_DEPTH - arrays_at_most)
    ):
        return True
    return not _too_deep(value)


def _read_fast(raw: bytes, text: str) -> object:
    """The value of the document ``raw`` (``text`` decoded); ``None`` when the hooked reader
    must decide (anything that is not strict, or anything this reader cannot vouch for)."""
    gathering = _GATHERING
    objects = gathering.objects
    try:
        try:
            value, end = gathering.decoder.raw_decode(text, _leading_blanks(text))
        except (ValueError, RecursionError, ArgsNotStrict):
            return None
        if end != len(text) and text[end:].strip(_JSON_BLANKS):
            return None
        marks = raw.translate(None, _ALL_BUT_MARKS)
        # One colon per member: a repeated name, which the decoder keeps once, leaves one
        # over. Counting the colons inside strings costs a split of the text, so only when
        # there are any.
        members = sum(map(len, objects))
        colons = marks.count(b":")
        if members != colons and members != colons - _colons_in_strings(raw):
            return None
        if _names_fold_together(set().union(*objects)):
            return None
        if not _depth_within_limit(marks, len(objects), value):
            return None
        return value
    finally:
        objects.clear()


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
        value = _read_fast(raw, text)
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
