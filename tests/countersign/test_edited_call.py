"""``gated`` runs the function with an approver's edited arguments: ``protocol.edited_call``
maps an edit back onto the function's parameters, or refuses one they cannot take."""

from __future__ import annotations

import inspect
from decimal import Decimal
from typing import Any

import pytest

from countersign import errors, protocol


def pay(amount: Decimal, payee: str, /, memo: str = "", *, urgent: bool = False) -> None: ...


def anything(amount: Decimal, *rest: Any, **extra: Any) -> None: ...


def run_with(function: Any, state: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return protocol.gated_call(inspect.signature(function), ("own",), {"k": 1}, state)


def test_an_unedited_call_runs_as_it_was_called() -> None:
    assert run_with(pay, {"status": "approved", "edited": False}) == (("own",), {"k": 1})


def test_each_edited_member_goes_to_its_parameter_and_defaults_fill_the_rest() -> None:
    state = {"edited": True, "arguments": '{"payee": "ACME", "amount": 400.00, "urgent": true}'}
    assert run_with(pay, state) == ((Decimal("400.00"), "ACME"), {"urgent": True})


def test_spread_and_extra_members_go_to_star_args_and_star_star_kwargs() -> None:
    state = {"edited": True, "arguments": '{"amount": 1, "rest": [2, 3], "note": "x"}'}
    assert run_with(anything, state) == ((1, 2, 3), {"note": "x"})


@pytest.mark.parametrize(
    "edit",
    [
        '{"amount": 1, "payee": "ACME", "fee": 2}',  # no such parameter
        '{"payee": "ACME"}',  # a positional-only parameter left out
        '{"amount": 1}',  # a required one left out
    ],
)
def test_an_edit_the_parameters_cannot_take_is_refused(edit: str) -> None:
    with pytest.raises(ValueError, match=errors.EDIT_DOES_NOT_FIT):
        run_with(pay, {"edited": True, "arguments": edit})


def test_an_edit_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match=errors.BAD_EDIT):
        run_with(pay, {"edited": True, "arguments": "[1]"})
