"""What the client's live tests share: an agent and its token, an approver, and payments
that the rules allow, hold or refuse."""

from __future__ import annotations

import hashlib

from django.contrib.auth.models import Permission, User

from approvals.models import Agent, AgentToken
from approvals.services.rules import cap_rule_save

TOKEN = "cs_client-tests-0123456789"
APPROVER, PASSWORD = "alice", "pw"
# Under the gate's limit: allowed. Over it: held for a person. A wire over 100: refused.
SMALL_PAYMENT = {"amount": "12.50"}
BIG_PAYMENT = {"amount": "600.00"}
BIG_WIRE = {"amount": "500.00"}


def world_create() -> None:
    agent = Agent.objects.create(name="bot", principal="carol", mode="danger_full_access")
    AgentToken.objects.create(
        agent=agent, digest=hashlib.sha256(TOKEN.encode()).hexdigest(), prefix=TOKEN[:8]
    )
    cap_rule_save(line="big: pay arg=amount max USD 500.00 -> gate")
    cap_rule_save(line="wires: wire arg=amount max USD 100.00 -> refuse")
    alice = User.objects.create_user(APPROVER, password=PASSWORD)
    alice.user_permissions.add(Permission.objects.get(codename="decide_call"))
