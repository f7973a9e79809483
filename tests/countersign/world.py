"""What the client's live tests share: an agent and its token, an approver, and payments
that the rules allow, hold or refuse."""

from __future__ import annotations

from tests.factories import agent_with_token, rule_make, user_make

TOKEN = "cs_client-tests-0123456789"
APPROVER, PASSWORD = "alice", "pw"
# Under the gate's limit: allowed. Over it: held for a person. A wire over 100: refused.
SMALL_PAYMENT = {"amount": "12.50"}
BIG_PAYMENT = {"amount": "600.00"}
BIG_WIRE = {"amount": "500.00"}


def world_create() -> None:
    agent_with_token(token=TOKEN)
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    rule_make(line="wires: wire arg=amount max USD 100.00 -> refuse")
    user_make(username=APPROVER, password=PASSWORD)
