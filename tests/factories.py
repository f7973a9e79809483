"""What tests build their world from: agents and their tokens, people, gates, cap rules and
calls. Rules, issued tokens and calls go through the services, so they carry what real ones do
(a rule's gate, the audit trail, ledger records, the verdict).

Every factory runs in this process against the test database; a server in another process
(``tests.live``) sees what they made once it is committed.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Sequence
from datetime import datetime

from django.apps import apps
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, Permission, User

from approvals.models import Agent, AgentToken, Call, CapRule, Gate, LedgerEntry, LedgerHour
from approvals.services.agents import SHOWN_PREFIX_LENGTH, agent_token_issue, token_digest
from approvals.services.calls import Submission, call_submit
from approvals.services.rules import cap_rule_save, gate_ensure

PASSWORD = "pw"  # every test person's, unless a test picks one


@functools.cache
def _password_hash(password: str) -> str:
    # Django's default hasher whatever a test's settings say: the live servers check these.
    hasher = PBKDF2PasswordHasher()
    return hasher.encode(password, hasher.salt())


DECIDE = "decide_call"
VIEW = "view_call"


def agent_make(
    *,
    name: str = "bot",
    principal: str = "carol",
    mode: str = "danger_full_access",
    allowed_principals: str = "",
    active: bool = True,
) -> Agent:
    """An agent, by default ``bot`` acting for ``carol`` in the mode where caps alone decide."""
    return Agent.objects.create(
        name=name,
        principal=principal,
        mode=mode,
        allowed_principals=allowed_principals,
        active=active,
    )


def token_make(*, agent: Agent, token: str | None = None) -> str:
    """A token for ``agent``: issued by the service, or ``token`` itself, stored as the
    service stores one (its digest and shown prefix) but without an audit entry, for a test
    that must know the token before the agent exists (a constant, another process)."""
    if token is None:
        return agent_token_issue(agent=agent)
    AgentToken.objects.create(
        agent=agent, digest=token_digest(token), prefix=token[:SHOWN_PREFIX_LENGTH]
    )
    return token


def agent_with_token(
    *,
    token: str | None = None,
    name: str = "bot",
    principal: str = "carol",
    mode: str = "danger_full_access",
    allowed_principals: str = "",
    active: bool = True,
) -> tuple[Agent, str]:
    """``agent_make`` and ``token_make``: the agent and its token."""
    agent = agent_make(
        name=name,
        principal=principal,
        mode=mode,
        allowed_principals=allowed_principals,
        active=active,
    )
    return agent, token_make(agent=agent, token=token)


def user_make(
    *,
    username: str,
    decide: bool = True,
    view: bool = False,
    groups: Sequence[Group] = (),
    superuser: bool = False,
    password: str = PASSWORD,
) -> User:
    """A person: by default one who may decide calls (``approvals.decide_call``); ``view``
    grants ``approvals.view_call``. A superuser holds every permission without grants. The
    user is read again, so no permission is cached on the object returned."""
    # The hash is the real PBKDF2 one (live servers check it), computed once per password: at
    # about 0.3 s a hash, hashing for every person was most of the database tests' time.
    user = User.objects.create(
        username=username,
        password=_password_hash(password),
        is_staff=superuser,
        is_superuser=superuser,
    )
    if not superuser:
        codenames = [code for code, wanted in ((DECIDE, decide), (VIEW, view)) if wanted]
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="approvals", codename__in=codenames)
        )
    user.groups.add(*groups)
    return User.objects.get(pk=user.pk)


def gate_make(
    *,
    name: str = "",
    group: Group | None = None,
    required_approvals: int = 1,
    timeout_seconds: int | None = None,
) -> Gate:
    """The gate called ``name`` (created by the service if no rule made it yet), set to
    these values."""
    gate = gate_ensure(name=name)
    Gate.objects.filter(pk=gate.pk).update(
        group=group, required_approvals=required_approvals, timeout_seconds=timeout_seconds
    )
    gate.refresh_from_db()
    return gate


def rule_make(*, line: str, enabled: bool = True) -> CapRule:
    """A cap rule saved by the service, which also makes the gate it holds calls at."""
    return cap_rule_save(line=line, enabled=enabled)


def payment(amount: str) -> str:
    """The arguments of a ``pay`` call of ``amount``, as an agent sends them."""
    return json.dumps({"amount": amount})


def call_make(
    *,
    agent: Agent,
    tool: str = "pay",
    arguments: str = "{}",
    principal: str | None = None,
    run_id: str = "",
    context: str = "",
    now: datetime | None = None,
) -> Call:
    """A call submitted by ``agent`` through the service, for its own principal unless
    ``principal`` is given; the verdict is the rules'."""
    submission = Submission(
        tool=tool,
        arguments=arguments,
        principal=agent.principal if principal is None else principal,
        run_id=run_id,
        context=context,
    )
    call, _ = call_submit(agent=agent, submission=submission, now=now)
    return call


def ledger_entries_move(*, recorded_at: datetime) -> None:
    """Every ledger entry dated ``recorded_at``, and the ledgers' hours made anew from them
    as the migration that brought the hours fills them: time passing for what was spent
    (the service never moves an entry)."""
    LedgerEntry.objects.update(recorded_at=recorded_at)
    LedgerHour.objects.all().delete()
    migration = importlib.import_module("approvals.migrations.0013_ledger_hours")
    migration.hours_from_entries(apps, None)
