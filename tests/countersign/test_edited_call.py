"""``gated`` runs the function with an approver's edited arguments: ``protocol.edited_call``
maps an edit back onto the function's parameters, or refuses one they cannot take with an
``EditDoesNotFit`` (a ``NotApproved``) that names what does not fit."""

from __future__ import annotations

import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest

from countersign import Client, errors, protocol
from tests.countersign.world import APPROVER, BIG_PAYMENT, PASSWORD, TOKEN
from tests.live import Approver, LiveServer

WAIT = 10.0  # a guard against hangs, not a measure


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


def test_an_unfit_edit_is_not_approved_and_names_what_does_not_fit() -> None:
    state = {"id": "c-1", "edited": True, "arguments": '{"amount": 1, "payee": "A", "fee": 2}'}
    with pytest.raises(errors.NotApproved) as raised:
        run_with(pay, state)
    assert isinstance(raised.value, errors.EditDoesNotFit)
    assert (raised.value.cause, raised.value.call_id) == (
        "got an unexpected keyword argument 'fee'",
        "c-1",
    )
    assert "Cause: got an unexpected keyword argument 'fee'." in str(raised.value)
    assert errors.EDIT_STAYS_COUNTED in str(raised.value)


@pytest.mark.django_db(transaction=True)
def test_gated_refuses_an_approved_edit_its_function_cannot_take(server: LiveServer) -> None:
    ran: list[object] = []
    with Client(server.url, TOKEN, timeout=WAIT) as client:

        @client.gated("pay", deadline=WAIT)
        def pay_once(amount: str) -> None:
            ran.append(amount)

        with ThreadPoolExecutor(1) as pool:
            attempt = pool.submit(pay_once, BIG_PAYMENT["amount"])
            call_id = pending_call(server)
            approver = Approver(server, APPROVER, PASSWORD)
            try:
                edit = '{"amount": "400.00", "fee": "1.00"}'
                assert approver.decide(call_id, approve=True, arguments=edit) == 303
            finally:
                approver.close()
            with pytest.raises(errors.NotApproved) as raised:
                attempt.result(timeout=WAIT)
        assert isinstance(raised.value, errors.EditDoesNotFit)
        assert "'fee'" in str(raised.value)
        assert raised.value.call_id == call_id
        # The service approved the edit, and its amount counts: the client ran nothing.
        assert client.get(call_id)["status"] == "approved"
    assert ran == []


def pending_call(server: LiveServer) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answer = httpx.get(
            f"{server.url}/api/v1/calls",
            params={"status": "pending"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        if items := answer.json()["items"]:
            return str(items[0]["id"])
        time.sleep(0.05)
    raise AssertionError("no pending call")
