"""The demo installation behind ``make run``: approvers, an admin, agents, the example rules
and a two-approval gate. Idempotent: running it again keeps what exists, and keeps the demo
agent's token working when it is given back (README.md, "A 60-second tour").

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

from approvals.models import Agent, AgentToken, Gate
from approvals.services.agents import agent_create_or_update, agent_token_rotate, token_digest
from approvals.services.rules import gate_ensure, rules_import

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
    have permission to view or edit anything")."""
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_password(DEMO_PASSWORD)
    user.is_staff = False
    if not user.email:  # the demo's mail channel writes to the approvers (to the console)
        user.email = f"{username}@{DEMO_EMAIL_DOMAIN}"
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


def _admin() -> None:
    """The demo admin: staff with every permission of the approvals app but deciding, so
    they edit rules, gates, agents, tokens, budgets, tool classes and permission rules and
    read calls, ledgers and the audit log, while the approvers decide (docs/ui.md); they edit
    the notification channels; and they read the failed logins and lift lockouts (axes'
    access attempts, approvals/accounts/lockouts.py)."""
    user, created = User.objects.get_or_create(username=DEMO_ADMIN)
    if created:
        user.set_password(DEMO_PASSWORD)
    user.is_staff = True
    user.save()
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label__in=("approvals", "notifications")
        ).exclude(codename=DECIDE_CODENAME)
        | Permission.objects.filter(content_type__app_label="axes", codename__in=AXES_CODENAMES)
    )


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
    """The demo, created or refreshed; ``stored_token`` is the token an earlier run printed;
    with ``url`` (where the server is about to listen), the other apps' parts too
    (``demo_prepared``)."""
    for username in DEMO_APPROVERS:
        _approver(username)
    _admin()
    rules_import(text=rules_file.read_text(encoding="utf-8"))
    gate_ensure(name=TWO_APPROVAL_GATE)
    Gate.objects.filter(name=TWO_APPROVAL_GATE).update(required_approvals=2)
    # Caps and gates decide for the demo agent; the intern asks before every call.
    agent = agent_create_or_update(
        name=DEMO_AGENT, principal="acme-ops", mode=Agent.Mode.DANGER_FULL_ACCESS
    )
    agent_create_or_update(name=DEMO_PROMPT_AGENT, principal="acme-ops", mode=Agent.Mode.PROMPT)
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
