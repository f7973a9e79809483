"""The demo installation behind ``make run``: approvers, an admin, agents, the example rules
and a two-approval gate. Created where missing, and only there: what exists is kept exactly as
an admin left it (a person's permissions, an agent's mode, a rule, a gate), so running
``make run`` again reverts nothing; the demo agent's token keeps working when it is given back
(README.md, "A 60-second tour").

What ``make run`` keeps between runs (the token it printed, the URL it served) lives in files
under ``var/``, read and written here so that ``demo_setup`` and ``demo_agent`` agree on them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.dispatch import Signal

from approvals.models import Agent, AgentToken, AuditEntry, CapRule, Gate
from approvals.services.agents import agent_create_or_update, agent_token_rotate, token_digest
from approvals.services.audit import audit_record
from approvals.services.rules import rules_import

DEMO_PASSWORD = "countersign-demo"  # noqa: S105 - a published demo login on 127.0.0.1
DEMO_APPROVERS = ("alice", "bob")
DEMO_ADMIN = "admin"
DEMO_AGENT = "demo-agent"
DEMO_PROMPT_AGENT = "demo-intern"
TWO_APPROVAL_GATE = "treasury"
DEMO_TOKEN_FILE = "demo_token"  # noqa: S105 - a file name, not a secret
DEMO_URL_FILE = "demo_url"
DEMO_DEFAULT_URL = "http://127.0.0.1:8000"
DECIDE_CODENAME = "decide_call"
DEMO_EMAIL_DOMAIN = "example.com"
# Sent in ``demo_ensure``'s transaction with ``url``, where the server is about to listen, so
# that other apps set up their part of the demo (notifications/demo.py: its channels).
demo_prepared = Signal()


@dataclass(frozen=True, slots=True)
class DemoSetup:
    approvers: tuple[str, ...]
    admin: str
    password: str
    agent: str
    token: str
    token_reused: bool


def _approver(username: str) -> None:
    """An approver decides held calls on the approver's pages; the admin is someone else's
    job, so an approver is not staff (staff without model permissions only meets "You don't
    have permission to view or edit anything"). Made once: an approver an admin changed
    (password, permissions, address, active) stays as changed."""
    if User.objects.filter(username=username).exists():
        return
    user = User(username=username, email=f"{username}@{DEMO_EMAIL_DOMAIN}")
    user.set_password(DEMO_PASSWORD)
    user.save()
    user.user_permissions.add(Permission.objects.get(codename=DECIDE_CODENAME))


# Reading every axes log, and deleting an access attempt (which unlocks it); axes' logs are
# written by axes alone.
AXES_CODENAMES = (
    "view_accessattempt",
    "delete_accessattempt",
    "view_accesslog",
    "view_accessfailurelog",
)


# People and groups: who may decide is part of the policy (a gate's group), and the
# notifications go to approvers' addresses (docs/notifications.md).
AUTH_MODELS = ("user", "group")


def _admin() -> None:
    """The demo admin: staff with every permission of the approvals app but deciding, so
    they edit rules, gates, agents, tokens, budgets, tool classes and permission rules and
    read calls, ledgers and the audit log, while the approvers decide (docs/ui.md); they edit
    the notification channels, people and groups; and they read the failed logins and lift
    lockouts (axes' access attempts, approvals/accounts/lockouts.py). Made once, like the
    approvers."""
    if User.objects.filter(username=DEMO_ADMIN).exists():
        return
    user = User(username=DEMO_ADMIN, is_staff=True)
    user.set_password(DEMO_PASSWORD)
    user.save()
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=("approvals", "notifications")
        ).exclude(codename=DECIDE_CODENAME)
        | Permission.objects.filter(content_type__app_label="axes", codename__in=AXES_CODENAMES)
        | Permission.objects.filter(
            content_type__app_label="auth", content_type__model__in=AUTH_MODELS
        )
    )


def _rules_ever_set_up() -> bool:
    """Whether this database has, or ever had, a cap rule: the audit log, append-only, keeps
    a saved rule's entry after the rule is deleted or renamed."""
    return (
        CapRule.objects.exists()
        or AuditEntry.objects.filter(action=AuditEntry.Action.CAP_RULE_SAVED).exists()
    )


def _example_rules(rules_file: Path) -> None:
    """The example rules and their two-approval gate, on a database that never had a rule:
    after that, rules and gates are the admin's, and a rule they edited, disabled, renamed or
    deleted stays so."""
    if _rules_ever_set_up():
        return
    if not Gate.objects.filter(name=TWO_APPROVAL_GATE).exists():
        gate = Gate.objects.create(name=TWO_APPROVAL_GATE, required_approvals=2)
        audit_record(
            action=AuditEntry.Action.GATE_CREATED,
            obj=gate,
            after=f"name={gate.name!r} required_approvals={gate.required_approvals}",
        )
    rules_import(text=rules_file.read_text(encoding="utf-8"))


def _agent(name: str, mode: Agent.Mode) -> Agent:
    """The demo agent ``name``, made in ``mode`` when missing; one that exists keeps the mode
    and principals an admin gave it."""
    existing = Agent.objects.filter(name=name).first()
    if existing is not None:
        return existing
    return agent_create_or_update(name=name, principal="acme-ops", mode=mode)


def _demo_token(agent: Agent, stored: str | None) -> tuple[str, bool]:
    """The stored token when it still works for ``agent``, so that restarting ``make run``
    leaves running agents connected; else a new one, the agent's older tokens revoked first
    (nobody holds a record of them any more), and whether it was reused."""
    if (
        stored
        and AgentToken.objects.filter(
            agent=agent, digest=token_digest(stored), revoked_at__isnull=True
        ).exists()
    ):
        return stored, True
    return agent_token_rotate(agent=agent), False


@transaction.atomic
def demo_ensure(
    *, rules_file: Path, stored_token: str | None = None, url: str | None = None
) -> DemoSetup:
    """The demo, its missing parts created and the rest left as it is; ``stored_token`` is the
    token an earlier run printed; with ``url`` (where the server is about to listen), the
    other apps' parts too (``demo_prepared``)."""
    for username in DEMO_APPROVERS:
        _approver(username)
    _admin()
    _example_rules(rules_file)
    # Caps and gates decide for the demo agent; the intern asks before every call.
    agent = _agent(DEMO_AGENT, Agent.Mode.DANGER_FULL_ACCESS)
    _agent(DEMO_PROMPT_AGENT, Agent.Mode.PROMPT)
    token, reused = _demo_token(agent, stored_token)
    if url is not None:
        demo_prepared.send(sender=DemoSetup, url=url)
    return DemoSetup(
        approvers=DEMO_APPROVERS,
        admin=DEMO_ADMIN,
        password=DEMO_PASSWORD,
        agent=agent.name,
        token=token,
        token_reused=reused,
    )


def demo_state_read(*, var_dir: Path, name: str) -> str | None:
    """A value an earlier ``make run`` kept under ``var_dir``; None when there is none."""
    try:
        return (var_dir / name).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def demo_state_write(*, var_dir: Path, name: str, value: str) -> None:
    """Keep ``value`` under ``var_dir`` readable by its owner only (``mkstemp`` creates the
    file 0600), swapped into place whole so that a reader never sees half of it."""
    var_dir.mkdir(parents=True, exist_ok=True)
    fd, draft = tempfile.mkstemp(dir=var_dir, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(value + "\n")
        os.replace(draft, var_dir / name)
    except BaseException:
        os.unlink(draft)
        raise
