"""Shared helpers for the capcore tests."""

from __future__ import annotations


def _texts_of(exc: BaseException) -> list[str]:
    texts = [str(exc), repr(exc)]
    for arg in exc.args:
        texts.extend([str(arg), repr(arg)])
    return texts


def assert_no_leak(exc: BaseException, token: str) -> None:
    """Fail if ``token`` shows in ``exc`` or anywhere along its cause/context chains.

    Checks ``str(e)``, ``repr(e)`` and every item of ``e.args`` (as ``str`` and ``repr``), then
    walks ``__cause__`` and ``__context__`` recursively (each exception once), so an input text
    kept by a chained ``UnicodeDecodeError``/``JSONDecodeError``/``KeyError`` is caught even
    when ``raise ... from None`` hides it from tracebacks.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for text in _texts_of(current):
            assert token not in text, (
                f"{type(current).__name__} in the chain of {type(exc).__name__} "
                "carries the input text"
            )
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
