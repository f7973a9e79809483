"""Strict JSON: ``strict_loads``, ``parse_arguments``, ``lookup``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import capcore
from capcore import (
    MAX_DEPTH,
    ArgAbsent,
    ArgsNotStrict,
    JSONNumber,
    NotAssessable,
    lookup,
    parse_arguments,
    strict_loads,
)
from capcore import strictjson as sj

Encoder = Callable[[str], "bytes | str"]


@pytest.fixture(autouse=True, scope="module", params=["hooked", "fast"])
def _reader(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs once through each reader: the hooked one alone, and the fast one (which
    hands the hooked one whatever it cannot vouch for)."""
    kept = sj.FAST_READER_FROM_OBJECTS
    sj.FAST_READER_FROM_OBJECTS = 0 if request.param == "fast" else 10**9
    yield
    sj.FAST_READER_FROM_OBJECTS = kept


def as_str(text: str) -> bytes | str:
    return text


def as_bytes(text: str) -> bytes | str:
    return text.encode("utf-8")


BOTH = pytest.mark.parametrize("encode", [as_str, as_bytes], ids=["str", "bytes"])


def refused(data: object) -> str:
    """The category ``strict_loads`` refuses ``data`` with (it must refuse it)."""
    with pytest.raises(ArgsNotStrict) as info:
        strict_loads(data)  # type: ignore[arg-type]
    assert type(info.value) is ArgsNotStrict
    return info.value.category


def same(actual: object, expected: object) -> bool:
    """Equal *and* of exactly the same types all the way down (``JSONNumber`` ≠ ``str``)."""
    if type(actual) is not type(expected):
        return False
    if type(expected) is dict:
        assert type(actual) is dict
        return actual.keys() == expected.keys() and all(
            same(actual[k], expected[k]) for k in expected
        )
    if type(expected) is list:
        assert type(actual) is list
        return len(actual) == len(expected) and all(
            same(a, e) for a, e in zip(actual, expected, strict=True)
        )
    return actual == expected


def nested_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_objects(depth: int) -> str:
    # `depth` objects: {"a":{"a":...{}...}}
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def nested_mixed(depth: int) -> str:
    opening, closing = [], []
    for level in range(depth - 1):
        if level % 2:
            opening.append('{"k":')
            closing.append("}")
        else:
            opening.append("[")
            closing.append("]")
    return "".join(opening) + "[]" + "".join(reversed(closing))


def test_category_constants_are_distinct_and_public() -> None:
    categories = [
        sj.NOT_BYTES_OR_STR,
        sj.INVALID_UTF8,
        sj.BYTE_ORDER_MARK,
        sj.DUPLICATE_NAME,
        sj.CASE_VARIANT_NAMES,
        sj.LONE_SURROGATE,
        sj.NON_FINITE_NUMBER,
        sj.TOO_DEEP,
        sj.TRAILING_DATA,
        sj.NOT_JSON,
        sj.NOT_AN_OBJECT,
    ]
    assert all(type(c) is str and c for c in categories)
    assert len(set(categories)) == len(categories)


def test_max_depth_is_64() -> None:
    assert MAX_DEPTH == 64
    assert capcore.MAX_DEPTH == 64


def test_args_not_strict_is_not_assessable() -> None:
    assert issubclass(ArgsNotStrict, NotAssessable)
    assert issubclass(ArgAbsent, NotAssessable)


# --- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(bytearray(b"{}"), id="bytearray"),
        pytest.param(memoryview(b"{}"), id="memoryview"),
        pytest.param(1, id="int"),
        pytest.param(None, id="none"),
        pytest.param({}, id="dict"),
        pytest.param(["{}"], id="list"),
        pytest.param(1.5, id="float"),
    ],
)
def test_refuses_input_that_is_neither_bytes_nor_str(data: object) -> None:
    assert refused(data) == sj.NOT_BYTES_OR_STR


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xff", id="ff"),
        pytest.param(b"\x80", id="lone-continuation"),
        pytest.param(b'{"a": "\xff"}', id="ff-in-string"),
        pytest.param(b'{"\xfe": 1}', id="fe-in-name"),
        pytest.param(b'"\xc3"', id="truncated-sequence"),
        pytest.param(b'"\xc3"  ', id="truncated-then-blank"),
        pytest.param(b'"\xc0\xaf"', id="overlong"),
        pytest.param(b'"\xe0\x80\xaf"', id="overlong-three-bytes"),
        pytest.param(b'"\xed\xa0\x80"', id="encoded-surrogate"),
        pytest.param(b'"\xed\xa0\xbd\xed\xb8\x80"', id="cesu8-pair"),
        pytest.param(b'"\xf4\x90\x80\x80"', id="above-max-code-point"),
        pytest.param(b'"caf\xe9"', id="latin1"),
        pytest.param(b"\xff\xfe{\x00}\x00", id="utf16-le-with-bom"),
        pytest.param(b'{"a": 1}\xff', id="invalid-after-value"),
    ],
)
def test_refuses_invalid_utf8(data: bytes) -> None:
    assert refused(data) == sj.INVALID_UTF8


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xef\xbb\xbf{}", id="bytes-object"),
        pytest.param(b'\xef\xbb\xbf{"a": 1}', id="bytes-members"),
        pytest.param(b"\xef\xbb\xbf", id="bytes-bom-only"),
        pytest.param(b'\xef\xbb\xbf"x"', id="bytes-string"),
        pytest.param("\ufeff{}", id="str-object"),
    ],
)
def test_refuses_a_byte_order_mark(data: bytes | str) -> None:
    assert refused(data) == sj.BYTE_ORDER_MARK


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param('{"a": 1, "a": 2}', id="top-level"),
        pytest.param('{"a": 1, "a": 1}', id="same-value"),
        pytest.param('{"a": 1, "b": 2, "a": 3}', id="not-adjacent"),
        pytest.param('{"": 1, "": 2}', id="empty-name"),
        pytest.param('{"x": {"y": 1, "y": 2}}', id="depth-2"),
        pytest.param('[{"a": 1, "a": 2}]', id="in-array"),
        pytest.param('{"a": [{"b": {"c": 1, "c": 2}}]}', id="depth-4"),
        pytest.param(nested_arrays(30)[:30] + '{"d": 1, "d": 2}' + "]" * 30, id="depth-31"),
        pytest.param(r'{"a": 1, "\u0061": 2}', id="same-after-unescaping"),
        pytest.param('{"é": 1, "é": 2}', id="non-ascii"),
    ],
)
def test_refuses_duplicate_names(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.DUPLICATE_NAME


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param('{"a": 1, "A": 2}', id="a-A"),
        pytest.param('{"A": 1, "a": 2}', id="A-a"),
        pytest.param('{"amount": 1, "Amount": 2}', id="amount-Amount"),
        pytest.param('{"amount": 1, "AMOUNT": 1}', id="same-value"),
        pytest.param('{"ß": 1, "SS": 2}', id="eszett-SS"),
        pytest.param('{"ß": 1, "ss": 2}', id="eszett-ss"),
        pytest.param(r'{"\u00df": 1, "SS": 2}', id="escaped-eszett-SS"),
        pytest.param('{"ﬁ": 1, "FI": 2}', id="ligature-fi"),
        pytest.param('{"ς": 1, "Σ": 2}', id="final-sigma"),
        pytest.param('{"k": 1, "\u212a": 2}', id="kelvin-sign"),
        pytest.param('{"x": {"k": 1, "K": 2}}', id="nested"),
        pytest.param('[1, {"Key": 1, "kEY": 2}]', id="in-array"),
    ],
)
def test_refuses_names_equal_under_casefold(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.CASE_VARIANT_NAMES


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(r'"\ud800"', id="string-high"),
        pytest.param(r'"\udfff"', id="string-low"),
        pytest.param(r'"\uD800"', id="string-upper-hex"),
        pytest.param(r'"abc\ud83d"', id="string-high-at-end"),
        pytest.param(r'"\ude00\ud83d"', id="string-reversed-pair"),
        pytest.param(r'"\ud83d\u0041"', id="string-high-then-letter"),
        pytest.param(r'"\ud83d\ud83d"', id="string-two-highs"),
        pytest.param(r'{"a": "\ud800"}', id="member-value"),
        pytest.param(r'{"\ud800": 1}', id="name"),
        pytest.param(r'{"x": {"ab\udc00": 1}}', id="nested-name"),
        pytest.param(r'[[[["\udc00"]]]]', id="nested-string"),
        pytest.param(
            "[" + "[]," * 70 + r'"\ud800"]', id="with-many-brackets"
        ),  # the depth walk and the surrogate walk run together
    ],
)
def test_refuses_escaped_lone_surrogates(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.LONE_SURROGATE


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param('"\ud800"', id="string-high"),
        pytest.param('"\udfff"', id="string-low"),
        pytest.param('{"a": "x\udc00y"}', id="member-value"),
        pytest.param('{"\ud800": 1}', id="name"),
        pytest.param('"\ude00\ud83d"', id="reversed-pair"),
        pytest.param('"\ud83d\ude00"', id="raw-pair-code-points"),
    ],
)
def test_refuses_raw_lone_surrogates_in_str_input(doc: str) -> None:
    assert refused(doc) == sj.LONE_SURROGATE


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("-Infinity", id="minus-Infinity"),
        pytest.param("[NaN]", id="in-array"),
        pytest.param('{"a": Infinity}', id="member"),
        pytest.param('{"a": [1, -Infinity]}', id="nested"),
    ],
)
def test_refuses_non_finite_numbers(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.NON_FINITE_NUMBER


@BOTH
@pytest.mark.parametrize(
    "make", [nested_arrays, nested_objects, nested_mixed], ids=["arrays", "objects", "mixed"]
)
def test_max_depth_containers_are_accepted(make: Callable[[int], str], encode: Encoder) -> None:
    doc = make(MAX_DEPTH)
    assert doc.count("[") + doc.count("{") == MAX_DEPTH
    value = strict_loads(encode(doc))
    levels = 0
    while isinstance(value, list | dict):
        levels += 1
        children = list(value.values()) if isinstance(value, dict) else value
        value = children[0] if children else None
    assert levels == MAX_DEPTH


@BOTH
@pytest.mark.parametrize(
    "make", [nested_arrays, nested_objects, nested_mixed], ids=["arrays", "objects", "mixed"]
)
def test_one_more_level_is_refused(make: Callable[[int], str], encode: Encoder) -> None:
    doc = make(MAX_DEPTH + 1)
    assert doc.count("[") + doc.count("{") == MAX_DEPTH + 1
    assert refused(encode(doc)) == sj.TOO_DEEP


def test_too_deep_counts_an_empty_innermost_container() -> None:
    assert refused("[" * MAX_DEPTH + "{}" + "]" * MAX_DEPTH) == sj.TOO_DEEP
    assert refused("[" * MAX_DEPTH + "[]" + "]" * MAX_DEPTH) == sj.TOO_DEEP


def test_too_deep_anywhere_in_the_document() -> None:
    doc = '{"shallow": [1, 2], "deep": ' + nested_arrays(MAX_DEPTH) + "}"
    assert refused(doc) == sj.TOO_DEEP


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(nested_arrays(100_000), id="arrays"),
        pytest.param(nested_objects(100_000), id="objects"),
        pytest.param(nested_mixed(100_000), id="mixed"),
    ],
)
def test_very_deep_nesting_is_refused(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.TOO_DEEP


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("[" * 100_000, id="arrays"),
        pytest.param('{"a":' * 100_000, id="objects"),
    ],
)
def test_very_deep_unclosed_nesting_is_refused(doc: str) -> None:
    # Both descriptions are true of this input; either category is acceptable.
    assert refused(doc) in (sj.TOO_DEEP, sj.NOT_JSON)


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("{} x", id="letter"),
        pytest.param("{}{}", id="second-object"),
        pytest.param("1 2", id="second-number"),
        pytest.param('"a""b"', id="second-string"),
        pytest.param("null null", id="second-null"),
        pytest.param("{}}", id="extra-brace"),
        pytest.param("[] ,", id="comma"),
        pytest.param("{} // comment", id="comment"),
        pytest.param("{}\x00", id="nul"),
        pytest.param("{}\u00a0", id="no-break-space"),
        pytest.param("{}\f", id="form-feed"),
        pytest.param("{}\v", id="vertical-tab"),
        pytest.param("{}\u2028", id="line-separator"),
        pytest.param("{}\u3000", id="ideographic-space"),
        pytest.param("{}\u0085", id="next-line"),
        pytest.param("{} \n\u00a0", id="blank-then-no-break-space"),
    ],
)
def test_refuses_trailing_data(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.TRAILING_DATA


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("", id="empty"),
        pytest.param(" \t\r\n", id="blank"),
        pytest.param("{", id="open-brace"),
        pytest.param("}", id="close-brace"),
        pytest.param("[1,]", id="trailing-comma-array"),
        pytest.param('{"a": 1,}', id="trailing-comma-object"),
        pytest.param("{'a': 1}", id="single-quotes"),
        pytest.param("{a: 1}", id="bare-name"),
        pytest.param('{"a" 1}', id="missing-colon"),
        pytest.param('{"a": }', id="missing-value"),
        pytest.param('"unterminated', id="unterminated-string"),
        pytest.param('"\x01"', id="raw-control-character"),
        pytest.param('"a\nb"', id="raw-newline-in-string"),
        pytest.param(r'"\x41"', id="bad-escape"),
        pytest.param(r'"\u12"', id="short-unicode-escape"),
        pytest.param("undefined", id="undefined"),
        pytest.param("True", id="python-true"),
        pytest.param("None", id="python-none"),
        pytest.param("nan", id="lower-nan"),
        pytest.param("+1", id="plus-sign"),
        pytest.param(".5", id="leading-point"),
        pytest.param("-", id="minus-only"),
        pytest.param("// c\n{}", id="leading-comment"),
        pytest.param("\u00a0{}", id="leading-no-break-space"),
        pytest.param("\f{}", id="leading-form-feed"),
        pytest.param("{\x00}", id="nul-inside"),
        pytest.param("{}"[::-1], id="reversed"),
    ],
)
def test_refuses_non_json(doc: str, encode: Encoder) -> None:
    assert refused(encode(doc)) == sj.NOT_JSON


def test_refuses_utf16_without_bom_as_non_json() -> None:
    assert refused('{"a": 1}'.encode("utf-16-le")) == sj.NOT_JSON


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("01", id="leading-zero"),
        pytest.param("-01", id="negative-leading-zero"),
        pytest.param('{"a": 01}', id="leading-zero-member"),
        pytest.param("1.", id="trailing-point"),
        pytest.param("0x10", id="hex"),
        pytest.param("1.e3", id="point-then-exponent"),
        pytest.param(" \ufeff{}", id="bom-after-blank"),
    ],
)
def test_refuses_other_near_json(doc: str) -> None:
    assert refused(doc) in (sj.NOT_JSON, sj.TRAILING_DATA, sj.BYTE_ORDER_MARK)


# --- accepted edges ---------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(r'"\ud83d\ude00"', "😀", id="escaped-pair"),
        pytest.param(r'"\uD83D\uDE00"', "😀", id="escaped-pair-upper-hex"),
        pytest.param(r'{"\ud83d\ude00": 1}', {"😀": JSONNumber("1")}, id="escaped-pair-name"),
        pytest.param('"😀"', "😀", id="raw-astral"),
        pytest.param(r'"\u0000"', "\x00", id="escaped-nul"),
        pytest.param(r'"\\ud800"', "\\ud800", id="escaped-backslash-then-text-ud800"),
        pytest.param(r'{"\\ud800": 1}', {"\\ud800": JSONNumber("1")}, id="same-in-name"),
        pytest.param(r'"\ue000"', "\ue000", id="private-use-not-surrogate"),
        pytest.param(r'"\ud7ff"', "\ud7ff", id="just-below-surrogates"),
        pytest.param("null", None, id="null"),
        pytest.param('{"a": null}', {"a": None}, id="null-member"),
        pytest.param("true", True, id="true"),
        pytest.param("false", False, id="false"),
        pytest.param('"12.50"', "12.50", id="string-stays-str"),
        pytest.param("{}", {}, id="empty-object"),
        pytest.param("[]", [], id="empty-array"),
        pytest.param(
            '{"a": {"x": 1}, "b": {"A": 2}}',
            {"a": {"x": JSONNumber("1")}, "b": {"A": JSONNumber("2")}},
            id="a-and-A-in-different-objects",
        ),
        pytest.param(
            '[{"a": 1}, {"A": 2}]',
            [{"a": JSONNumber("1")}, {"A": JSONNumber("2")}],
            id="a-and-A-in-sibling-objects",
        ),
        pytest.param('{"a": {"A": 1}}', {"a": {"A": JSONNumber("1")}}, id="a-parent-of-A"),
        pytest.param(
            '{"ß": 1, "s": 2}', {"ß": JSONNumber("1"), "s": JSONNumber("2")}, id="eszett-and-s"
        ),
        pytest.param(
            '{"é": 1, "e\u0301": 2}',
            {"é": JSONNumber("1"), "e\u0301": JSONNumber("2")},
            id="no-unicode-normalisation",
        ),
        pytest.param(
            '["' + "[" * 100 + '{"]',
            ["[" * 100 + "{"],
            id="brackets-inside-a-string",
        ),
        pytest.param(
            "[" + "[]," * 100 + "[]]",
            [[] for _ in range(101)],
            id="many-shallow-siblings",
        ),
    ],
)
def test_accepts(doc: str, expected: object, encode: Encoder) -> None:
    assert same(strict_loads(encode(doc)), expected)


@BOTH
@pytest.mark.parametrize(
    "literal",
    [
        pytest.param("12.50", id="trailing-zero-kept"),
        pytest.param("1e3", id="exponent-kept"),
        pytest.param("1E3", id="upper-exponent-kept"),
        pytest.param("-12.5e-3", id="negative-exponent"),
        pytest.param("1E400", id="beyond-float-range"),
        pytest.param("0", id="zero"),
        pytest.param("-0", id="minus-zero"),
        pytest.param("-0.0", id="minus-zero-fraction"),
        pytest.param("9223372036854775808", id="beyond-int64"),
        pytest.param("0.1000000000000000055511151231257827", id="beyond-float-precision"),
        pytest.param("1" + "0" * 9_999, id="ten-thousand-digits"),
    ],
)
def test_numbers_come_back_exactly_as_written(literal: str, encode: Encoder) -> None:
    alone = strict_loads(encode(literal))
    in_array = strict_loads(encode(f"[{literal}]"))
    in_object = strict_loads(encode(f'{{"n": {literal}}}'))
    assert same(alone, JSONNumber(literal))
    assert same(in_array, [JSONNumber(literal)])
    assert same(in_object, {"n": JSONNumber(literal)})


@BOTH
@pytest.mark.parametrize(
    "blank",
    [
        pytest.param(" ", id="space"),
        pytest.param("\t", id="tab"),
        pytest.param("\n", id="lf"),
        pytest.param("\r", id="cr"),
        pytest.param("\r\n", id="crlf"),
        pytest.param(" \t\n\r" * 10, id="mixture"),
    ],
)
def test_json_white_space_around_the_value_is_accepted(blank: str, encode: Encoder) -> None:
    assert strict_loads(encode("{}" + blank)) == {}
    assert strict_loads(encode(blank + "{}")) == {}
    assert same(strict_loads(encode(blank + "1" + blank)), JSONNumber("1"))


def test_bytes_and_str_give_the_same_value() -> None:
    doc = '{"name": "café 😀", "n": [1, 2.50, null, true], "nested": {"k": "v"}}'
    assert same(strict_loads(doc.encode("utf-8")), strict_loads(doc))


def test_nested_object_and_array_values() -> None:
    value = strict_loads(b'{"a": [1, {"b": "x"}], "c": {"d": null}}')
    assert same(
        value,
        {"a": [JSONNumber("1"), {"b": "x"}], "c": {"d": None}},
    )


# --- parse_arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("", id="empty-str"),
        pytest.param(b"", id="empty-bytes"),
        pytest.param("  \n", id="blank-str"),
        pytest.param(b" \t\r\n", id="blank-bytes"),
        pytest.param("\t", id="tab"),
    ],
)
def test_parse_arguments_empty_is_empty_object(data: bytes | str) -> None:
    result = parse_arguments(data)
    assert result == {}
    assert type(result) is dict


@BOTH
def test_parse_arguments_returns_the_object(encode: Encoder) -> None:
    result = parse_arguments(encode('{"amount": 12.50, "currency": "EUR"}'))
    assert type(result) is dict
    assert same(result, {"amount": JSONNumber("12.50"), "currency": "EUR"})


@BOTH
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param("[]", id="empty-array"),
        pytest.param('[{"a": 1}]', id="array-of-object"),
        pytest.param('"text"', id="string"),
        pytest.param('""', id="empty-string"),
        pytest.param("12.50", id="number"),
        pytest.param("null", id="null"),
        pytest.param("true", id="true"),
        pytest.param(" [] \n", id="array-with-blanks"),
    ],
)
def test_parse_arguments_refuses_non_objects(doc: str, encode: Encoder) -> None:
    with pytest.raises(ArgsNotStrict) as info:
        parse_arguments(encode(doc))
    assert info.value.category == sj.NOT_AN_OBJECT


@pytest.mark.parametrize(
    ("data", "category"),
    [
        pytest.param('{"a": 1, "a": 2}', sj.DUPLICATE_NAME, id="duplicate"),
        pytest.param('{"a": 1, "A": 2}', sj.CASE_VARIANT_NAMES, id="case-variant"),
        pytest.param(b"\xef\xbb\xbf{}", sj.BYTE_ORDER_MARK, id="bom"),
        pytest.param(b"\xef\xbb\xbf", sj.BYTE_ORDER_MARK, id="bom-only"),
        pytest.param("\u00a0", sj.NOT_JSON, id="no-break-space-only"),
        pytest.param("\f", sj.NOT_JSON, id="form-feed-only"),
        pytest.param("{} x", sj.TRAILING_DATA, id="trailing"),
        pytest.param(b"\xff", sj.INVALID_UTF8, id="invalid-utf8"),
        pytest.param(None, sj.NOT_BYTES_OR_STR, id="none"),
        pytest.param(bytearray(b""), sj.NOT_BYTES_OR_STR, id="empty-bytearray"),
        pytest.param({}, sj.NOT_BYTES_OR_STR, id="dict"),
        pytest.param('"\ud800"', sj.LONE_SURROGATE, id="lone-surrogate"),
    ],
)
def test_parse_arguments_is_strict(data: object, category: str) -> None:
    with pytest.raises(ArgsNotStrict) as info:
        parse_arguments(data)  # type: ignore[arg-type]
    assert info.value.category == category


# --- lookup -----------------------------------------------------------------------------

DOC = '{"a": {"b": {"c": "12.50"}}, "n": 7, "z": null, "list": [1, 2], "s": "xyz", "Amount": 3}'


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(DOC, id="str"),
        pytest.param(DOC.encode("utf-8"), id="bytes"),
        pytest.param(parse_arguments(DOC), id="dict"),
    ],
)
@pytest.mark.parametrize("container", [list, tuple], ids=["list-path", "tuple-path"])
def test_lookup_finds_members(args: bytes | str | dict[str, Any], container: type) -> None:
    assert same(lookup(args, container(["a", "b", "c"])), "12.50")
    assert same(lookup(args, container(["n"])), JSONNumber("7"))
    assert same(lookup(args, container(["a", "b"])), {"c": "12.50"})
    assert same(lookup(args, container(["list"])), [JSONNumber("1"), JSONNumber("2")])
    assert lookup(args, container(["z"])) is None


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(DOC, id="str"),
        pytest.param(DOC.encode("utf-8"), id="bytes"),
        pytest.param(parse_arguments(DOC), id="dict"),
    ],
)
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(["missing"], id="missing-top"),
        pytest.param(["a", "missing"], id="missing-nested"),
        pytest.param(["a", "b", "c", "d"], id="through-string-leaf"),
        pytest.param([], id="empty-path"),
        pytest.param((), id="empty-tuple-path"),
        pytest.param([""], id="empty-name"),
        pytest.param(["a", ""], id="empty-nested-name"),
        pytest.param(["list", "0"], id="through-list"),
        pytest.param(["s", "x"], id="through-string"),
        pytest.param(["n", "x"], id="through-number"),
        pytest.param(["z", "x"], id="through-null"),
        pytest.param(["amount"], id="case-differs-lower"),
        pytest.param(["AMOUNT"], id="case-differs-upper"),
        pytest.param(["A"], id="case-differs-top"),
        pytest.param(["a", "B", "c"], id="case-differs-nested"),
    ],
)
def test_lookup_absent(args: bytes | str | dict[str, Any], path: list[str]) -> None:
    with pytest.raises(ArgAbsent):
        lookup(args, path)


def test_lookup_empty_name_is_absent_even_when_the_document_has_one() -> None:
    with pytest.raises(ArgAbsent):
        lookup('{"": 1}', [""])


@pytest.mark.parametrize("args", [pytest.param("", id="empty"), pytest.param(b"  ", id="blank")])
def test_lookup_in_empty_arguments_is_absent(args: bytes | str) -> None:
    with pytest.raises(ArgAbsent):
        lookup(args, ["a"])


@pytest.mark.parametrize(
    "path", [pytest.param("a", id="one-char-str"), pytest.param("abc", id="str")]
)
def test_lookup_refuses_a_str_path(path: str) -> None:
    with pytest.raises(TypeError):
        lookup('{"a": 1, "abc": 2}', path)


@pytest.mark.parametrize(
    ("args", "category"),
    [
        pytest.param('{"a": 1, "a": 2}', sj.DUPLICATE_NAME, id="duplicate-on-path"),
        pytest.param('{"a": 1, "b": {"c": 1, "C": 2}}', sj.CASE_VARIANT_NAMES, id="off-path"),
        pytest.param('{"a": 1, "b": NaN}', sj.NON_FINITE_NUMBER, id="nan-off-path"),
        pytest.param('{"a": 1} x', sj.TRAILING_DATA, id="trailing"),
        pytest.param('[{"a": 1}]', sj.NOT_AN_OBJECT, id="array"),
        pytest.param(b'{"a": 1, "b": "\xff"}', sj.INVALID_UTF8, id="invalid-utf8"),
    ],
)
def test_lookup_checks_the_whole_document_first(args: bytes | str, category: str) -> None:
    with pytest.raises(ArgsNotStrict) as info:
        lookup(args, ["a"])
    assert info.value.category == category


def test_lookup_null_is_none() -> None:
    assert lookup('{"amount": null}', ["amount"]) is None
    assert lookup(b'{"x": {"amount": null}}', ("x", "amount")) is None


# --- properties -------------------------------------------------------------------------


@given(st.binary())
def test_arbitrary_bytes_raise_only_args_not_strict(data: bytes) -> None:
    with contextlib.suppress(ArgsNotStrict):
        strict_loads(data)


@given(st.text())
def test_arbitrary_text_raises_only_args_not_strict(text: str) -> None:
    with contextlib.suppress(ArgsNotStrict):
        strict_loads(text)


JSONISH_TOKENS = [
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    '"a"',
    '"A"',
    '"ß"',
    '"SS"',
    "1",
    "-0",
    "1e3",
    "12.50",
    "null",
    "true",
    "NaN",
    "-Infinity",
    r'"\ud800"',
    r'"\ud83d\ude00"',
    r'"\\ud800"',
    '"\ud800"',
    " ",
    "\n",
    "\u00a0",
    "\ufeff",
    '"',
    "\\",
]


@given(st.lists(st.sampled_from(JSONISH_TOKENS)).map("".join), st.booleans())
def test_json_like_token_soup_raises_only_args_not_strict(text: str, in_bytes: bool) -> None:
    data: bytes | str = text.encode("utf-8", "surrogatepass") if in_bytes else text
    with contextlib.suppress(ArgsNotStrict):
        strict_loads(data)


# Text without surrogates: json.dumps escapes a lone surrogate and strict JSON refuses it.
texts = st.text(st.characters(codec="utf-8"), max_size=12)
scalars = st.none() | st.booleans() | st.integers() | texts


def _object_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(
        st.tuples(texts, children), max_size=5, unique_by=lambda pair: pair[0].casefold()
    ).map(dict)


json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | _object_of(children),
    max_leaves=25,
)


def depth_of(value: object) -> int:
    if type(value) is dict:
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if type(value) is list:
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def as_loaded(value: object) -> object:
    """What strict_loads should return for a Python value serialised with json.dumps."""
    if type(value) is bool or value is None or type(value) is str:
        return value
    if type(value) is int:
        return JSONNumber(str(value))
    if type(value) is dict:
        return {k: as_loaded(v) for k, v in value.items()}
    assert type(value) is list
    return [as_loaded(v) for v in value]


def wrap(value: object, levels: int, names: str) -> object:
    for level in range(levels):
        value = {names: value} if level % 2 else [value]
    return value


dump_options = st.fixed_dictionaries(
    {
        "ensure_ascii": st.booleans(),
        "indent": st.sampled_from([None, 0, 2, "\t"]),
        "sort_keys": st.booleans(),
    }
)


@given(
    value=json_values,
    extra=st.integers(min_value=0, max_value=MAX_DEPTH),
    name=texts,
    options=dump_options,
    in_bytes=st.booleans(),
)
def test_generated_json_within_the_rules_is_accepted(
    value: object, extra: int, name: str, options: dict[str, Any], in_bytes: bool
) -> None:
    value = wrap(value, extra, name)
    assume(depth_of(value) <= MAX_DEPTH)
    text = json.dumps(value, **options)
    data: bytes | str = text.encode("utf-8") if in_bytes else text
    assert same(strict_loads(data), as_loaded(value))


@given(
    value=json_values,
    extra=st.integers(min_value=MAX_DEPTH + 1, max_value=3 * MAX_DEPTH),
    name=texts,
)
def test_generated_json_too_deep_is_refused(value: object, extra: int, name: str) -> None:
    assert refused(json.dumps(wrap(value, extra, name))) == sj.TOO_DEEP


@given(name=texts, value=json_values, in_bytes=st.booleans())
def test_generated_duplicate_names_are_refused(name: str, value: object, in_bytes: bool) -> None:
    member = json.dumps(name) + ": " + json.dumps(value)
    text = "{" + member + ", " + member + "}"
    assert refused(text.encode("utf-8") if in_bytes else text) == sj.DUPLICATE_NAME


@given(name=st.text(st.characters(codec="utf-8"), min_size=1, max_size=8))
def test_generated_case_variant_names_are_refused(name: str) -> None:
    variant = name.swapcase()
    assume(variant != name and variant.casefold() == name.casefold())
    assert refused(json.dumps({name: 1, variant: 2})) == sj.CASE_VARIANT_NAMES


def names_of(value: object) -> set[str]:
    if type(value) is dict:
        return set(value).union(*map(names_of, value.values()))
    if type(value) is list:
        return set().union(*map(names_of, value))
    return set()


def fast_reading(raw: bytes) -> object:
    return sj._read_fast(raw, raw.decode())


@given(value=json_values, options=dump_options)
def test_the_fast_reader_vouches_for_what_it_can(value: object, options: dict[str, Any]) -> None:
    """The fast reader is taken, not merely fallen back from, and reads the same value: for
    an object or array without names that fold together anywhere in it (colons in strings,
    long integers and ``-0`` are fine)."""
    assume(type(value) is dict or type(value) is list)
    names = names_of(value)
    assume(len({name.casefold() for name in names}) == len(names))
    raw = json.dumps(value, **options).encode("utf-8")
    assert same(fast_reading(raw), as_loaded(value))


def _numbered_members(items: list[object]) -> dict[str, object]:
    return {f"c{i}": item for i, item in enumerate(items)}


bracket_texts = st.text(st.sampled_from('{}[]"\\:a'), max_size=6)
small_containers = st.recursive(
    bracket_texts,
    lambda children: (
        st.lists(children, max_size=3) | st.lists(children, max_size=3).map(_numbered_members)
    ),
    max_leaves=6,
)


@given(
    levels=st.integers(MAX_DEPTH - 4, MAX_DEPTH + 2),
    objects=st.lists(st.booleans(), min_size=MAX_DEPTH + 2, max_size=MAX_DEPTH + 2),
    siblings=st.dictionaries(
        st.integers(0, MAX_DEPTH + 1), st.lists(small_containers, min_size=1, max_size=3)
    ),
    options=dump_options,
)
def test_the_fast_reader_keeps_the_depth_limit_in_wide_documents(
    levels: int, objects: list[bool], siblings: dict[int, list[object]], options: dict[str, Any]
) -> None:
    """A document near the limit with more brackets than levels, some of them in strings:
    the fast reader vouches for it exactly when it nests at most ``MAX_DEPTH`` deep."""
    value: object = "leaf"
    for level in reversed(range(levels)):
        beside = siblings.get(level, [])
        if objects[level]:
            value = {"inner": value, **{f"s{i}": item for i, item in enumerate(beside)}}
        else:
            value = [value, *beside]
    raw = json.dumps(value, **options).encode("utf-8")
    if depth_of(value) <= MAX_DEPTH:
        assert same(fast_reading(raw), as_loaded(value))
    else:
        assert fast_reading(raw) is None
        assert refused(raw) == sj.TOO_DEEP


@pytest.mark.parametrize("memo", ["plain", "with {braces} and [brackets]"])
def test_the_fast_reader_vouches_for_many_shallow_objects(memo: str) -> None:
    """More braces than the depth limit, in a document three levels deep: vouched for, with
    braces in its strings or not."""
    value = {"memo": memo, "items": [{"n": i, "payee": {"name": f"p{i}"}} for i in range(40)]}
    raw = json.dumps(value).encode()
    assert raw.count(b"{") > MAX_DEPTH
    assert same(fast_reading(raw), as_loaded(value))


def strings_and_names(value: object) -> Iterator[str]:
    if type(value) is str:
        yield value
    elif type(value) is dict:
        for name, child in value.items():
            yield name
            yield from strings_and_names(child)
    elif type(value) is list:
        for child in value:
            yield from strings_and_names(child)


colon_texts = st.text(st.sampled_from(':"\\\\/ab\n\u00e9'), max_size=8)


@given(
    value=st.recursive(
        colon_texts,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(colon_texts, children, max_size=4)
        ),
        max_leaves=15,
    ),
    options=dump_options,
)
def test_colons_in_strings_are_counted_exactly(value: object, options: dict[str, Any]) -> None:
    raw = json.dumps(value, **options).encode("utf-8")
    expected = sum(text.count(":") for text in strings_and_names(value))
    assert sj._colons_in_strings(raw) == expected


def test_the_fast_reader_vouches_for_many_objects_with_numbers() -> None:
    record = {
        "invoiceId": "INV-2026-00000",
        "amount": "1250.00",
        "lineItems": [
            {"itemId": i, "unitPrice": f"{10 + i}.50", "quantity": 1 + i % 3, "isTaxable": True}
            for i in range(20)
        ],
        "rates": [1.5, -0.25, 12e3, 2048, -3, 10**17],
    }
    raw = json.dumps({"records": [record] * 3, "count": 3}, indent=1).encode()
    expected = json.loads(raw, parse_float=JSONNumber, parse_int=JSONNumber)
    assert same(fast_reading(raw), expected)


def hooked_reading(data: bytes | str) -> tuple[str, object]:
    """What the hooked reader alone makes of ``data``: ``("value", v)`` or ``("refused", c)``."""
    kept = sj.FAST_READER_FROM_OBJECTS
    sj.FAST_READER_FROM_OBJECTS = 10**9
    try:
        return ("value", strict_loads(data))
    except ArgsNotStrict as refusal:
        return ("refused", refusal.category)
    finally:
        sj.FAST_READER_FROM_OBJECTS = kept


# JSON text that often breaks the rules the fast reader vouches for: repeated and
# case-variant names, colons in strings and names, -0, long integers, exact number literals,
# escapes (lone surrogates among them), and nesting deep enough to cross MAX_DEPTH.
tricky_names = st.sampled_from(["a", "A", "b", "ß", "SS", "ss", "x:y", "", "\\u0041", "\\"])
tricky_scalars = (
    st.sampled_from(
        [
            "0",
            "-0",
            "-0.0",
            "-0e1",
            "1",
            "12.50",
            "1e3",
            "1E+3",
            "-7",
            "1023",
            "1024",
            "999999999999999999",
            "1000000000000000000",
            "-999999999999999999",
            "-1000000000000000000",
            "123456789012345678901234567890",
            "true",
            "false",
            "null",
            '"a:b"',
            '""',
            '"-0"',
            '"-0,"',
            '"\\ud800"',
            '"\\ud83d\\ude00"',
            '"\\u003a"',
            '"\\""',
            "NaN",
        ]
    )
    | st.integers().map(str)
    | texts.map(json.dumps)
)


def _array_text(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def _object_text(members: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f'"{name}": {value}' for name, value in members) + "}"


tricky_json = st.recursive(
    tricky_scalars,
    lambda children: (
        st.lists(children, max_size=4).map(_array_text)
        | st.lists(st.tuples(tricky_names, children), max_size=4).map(_object_text)
    ),
    max_leaves=20,
)


@given(document=tricky_json, levels=st.integers(0, MAX_DEPTH + 2), in_bytes=st.booleans())
def test_the_fast_reader_agrees_with_the_hooked_one(
    document: str, levels: int, in_bytes: bool
) -> None:
    """Whatever the fast reader vouches for, the hooked reader reads to the same value, with
    the same text for every number; what the hooked reader refuses, the fast one never
    vouches for, except an escaped lone surrogate, which ``strict_loads`` looks for after
    either reader."""
    text = "[" * levels + document + "]" * levels
    reading = hooked_reading(text.encode() if in_bytes else text)
    fast = fast_reading(text.encode())
    if fast is None:
        return
    if reading == ("refused", sj.LONE_SURROGATE):
        assert sj._has_lone_surrogate(fast)
        return
    assert reading[0] == "value"
    assert same(fast, reading[1])


@given(name=st.text(st.characters(codec="utf-8"), min_size=1, max_size=8), in_list=st.booleans())
def test_case_variants_are_refused_deep_in_a_document_of_many_objects(
    name: str, in_list: bool
) -> None:
    variant = name.swapcase()
    assume(variant != name and variant.casefold() == name.casefold())
    inner = {name: 1, variant: 2}
    document = {"items": [{"a": 1}, {"b": 2}, [inner] if in_list else {"x": inner}]}
    assert refused(json.dumps(document, ensure_ascii=False)) == sj.CASE_VARIANT_NAMES
    assert refused(json.dumps(document)) == sj.CASE_VARIANT_NAMES
