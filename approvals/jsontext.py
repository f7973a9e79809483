"""JSON text from ``capcore.strict_loads`` values, with number literals exactly as written
(``json.dumps`` would quote a ``JSONNumber``, turning ``12.50`` into ``"12.50"``)."""

from __future__ import annotations

import json

import capcore

_LITERALS: dict[object, str] = {True: "true", False: "false", None: "null"}


def _scalar(value: object) -> str:
    if type(value) is capcore.JSONNumber:
        return str(value)
    if type(value) is str:
        return json.dumps(value, ensure_ascii=False)
    return _LITERALS[value]


def compact(value: object) -> str:
    """Members in the order received, ``,`` and ``:`` separators, non-ASCII unescaped."""
    if type(value) is dict:
        return "{" + ",".join(f"{_scalar(k)}:{compact(v)}" for k, v in value.items()) + "}"
    if type(value) is list:
        return "[" + ",".join(compact(item) for item in value) + "]"
    return _scalar(value)


def pretty(value: object, indent: str = "") -> str:
    """Indented by two spaces a level, for showing arguments to a person."""
    inner = indent + "  "
    if type(value) is dict and value:
        members = (f"{inner}{_scalar(k)}: {pretty(v, inner)}" for k, v in value.items())
        return "{\n" + ",\n".join(members) + f"\n{indent}}}"
    if type(value) is list and value:
        items = (f"{inner}{pretty(item, inner)}" for item in value)
        return "[\n" + ",\n".join(items) + f"\n{indent}]"
    if type(value) in (dict, list):
        return "{}" if type(value) is dict else "[]"
    return _scalar(value)
