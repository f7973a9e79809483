"""No float in capcore: no ``float(`` call and no float (or imaginary) literal in any module."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

import capcore

CAPCORE = Path(capcore.__file__).resolve().parent
MODULES = sorted(CAPCORE.rglob("*.py"))


def float_findings(source: str) -> list[str]:
    """``"line:col text"`` for every ``float(`` call and float/imaginary literal in ``source``.

    Works on tokens, so strings, docstrings and comments are never matched.
    """
    findings: list[str] = []
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    ]
    for token, following in zip(tokens, [*tokens[1:], None], strict=True):
        where = f"{token.start[0]}:{token.start[1]}"
        if token.type == tokenize.NUMBER:
            literal = token.string.lower()
            if literal.startswith(("0x", "0o", "0b")):
                continue
            if "." in literal or "e" in literal or literal.endswith("j"):
                findings.append(f"{where} {token.string}")
        elif (
            token.type == tokenize.NAME
            and token.string == "float"
            and following is not None
            and following.type == tokenize.OP
            and following.string == "("
        ):
            findings.append(f"{where} float(")
    return findings


def test_capcore_modules_are_found() -> None:
    names = {path.name for path in MODULES}
    assert {"__init__.py", "amounts.py", "currency.py", "strictjson.py", "errors.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(CAPCORE)) for p in MODULES])
def test_module_has_no_float(path: Path) -> None:
    findings = float_findings(path.read_text(encoding="utf-8"))
    assert not findings, f"float in {path.relative_to(CAPCORE.parent)}: {findings}"


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("x = 1.5\n", id="decimal-literal"),
        pytest.param("x = 1.\n", id="trailing-point"),
        pytest.param("x = .5\n", id="leading-point"),
        pytest.param("x = 1e3\n", id="exponent"),
        pytest.param("x = 1E-3\n", id="upper-exponent"),
        pytest.param("x = 1_000.000_1\n", id="underscores"),
        pytest.param("x = 2j\n", id="imaginary"),
        pytest.param("x = float('1')\n", id="float-call"),
        pytest.param("x = float ('1')\n", id="float-call-with-space"),
        pytest.param("def f():\n    return float(\n        '1'\n    )\n", id="multiline-call"),
    ],
)
def test_detector_finds_floats(source: str) -> None:
    assert float_findings(source)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("x = 10**18\n", id="integer"),
        pytest.param("x = 1_000_000\n", id="underscored-integer"),
        pytest.param("x = 0xE + 0XFE + 0o17 + 0b1\n", id="hex-octal-binary"),
        pytest.param("x = '1.5'\n", id="in-string"),
        pytest.param("x = 'float(1)'\n", id="call-in-string"),
        pytest.param('"""No float(x) here, nor 1.5."""\n', id="in-docstring"),
        pytest.param("x = 1  # 1.5 and float(x)\n", id="in-comment"),
        pytest.param("x = isinstance(y, float)\n", id="float-type-not-called"),
        pytest.param("x = obj.parse_float\n", id="other-name"),
        pytest.param("x = y.z\n", id="attribute-access"),
    ],
)
def test_detector_ignores_non_floats(source: str) -> None:
    assert not float_findings(source)
