"""The demo installation behind ``make run``: approvers, agents, the example rules and a
two-approval gate. Idempotent: running it again keeps what exists and issues a new token."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.utils import timezone

from approvals.models import Agent, AgentToken, Gate
from approvals.services.agents import agent_create_or_update, agent_token_issue
from approvals.services.rules import gate_ensure, rules_import

DEMO_PASSWORD = "countersign-demo"  # noqa: S105 - a published demo login on 127.0.0.1
DEMO_APPROVERS = ("alice", "bob")
DEMO_AGENT = "demo-agent"
DEMO_PROMPT_AGENT = "demo-intern"
TWO_APPROVAL_GATE = "treasury"


@dataclass(frozen=True, slots=True)
class DemoSetup:
    approvers: tuple[str, ...]
    password: str
    agent: str
    token: str
    prompt_agent: str
    prompt_token: str


def _approver(username: str) -> None:
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(DEMO_PASSWORD)
        user.is_staff = True  # so the demo can open the admin too
        user.save()
    user.user_permissions.add(Permission.objects.get(codename="decide_call"))


def _fresh_token(agent: Agent) -> str:
    """Revoke the demo agent's older tokens: only the one printed now works."""
    AgentToken.objects.filter(agent=agent, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    return agent_token_issue(agent=agent)


@transaction.atomic
def demo_ensure(*, rules_file: Path) -> DemoSetup:
    for username in DEMO_APPROVERS:
        _approver(username)
    rules_import(text=rules_file.read_text(encoding="utf-8"))
    gate_ensure(name=TWO_APPROVAL_GATE)
    Gate.objects.filter(name=TWO_APPROVAL_GATE).update(required_approvals=2)
    # Caps and gates decide for the demo agent; the intern asks before every call.
    agent = agent_create_or_update(
        name=DEMO_AGENT, principal="acme-ops", mode=Agent.Mode.DANGER_FULL_ACCESS
    )
    intern = agent_create_or_update(
        name=DEMO_PROMPT_AGENT, principal="acme-ops", mode=Agent.Mode.PROMPT
    )
    return DemoSetup(
        approvers=DEMO_APPROVERS,
        password=DEMO_PASSWORD,
        agent=agent.name,
        token=_fresh_token(agent),
        prompt_agent=intern.name,
        prompt_token=_fresh_token(intern),
    )
