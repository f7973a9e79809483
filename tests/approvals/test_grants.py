"""Grants that say what they grant (docs/ui.md, "Grants"): what each scope lets through
afterwards, what the form says, the refusal of an unknown scope, and the grants on the
agent's admin page, revoked with an audit entry."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals.models import Agent, Approval, AuditEntry, Budget, Call, PermissionRule
from approvals.services.decisions import SCOPE_NOT_GRANTABLE, SCOPE_UNKNOWN, BadScope, call_decide
from approvals.services.statements import policy_stamp_read
from tests.factories import agent_make, call_make, payment, rule_make, user_make

pytestmark = pytest.mark.django_db

PUSH = json.dumps({"command": "git push"})
WIPE = json.dumps({"command": "rm -rf /"})
T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def agent() -> Agent:
    """An agent whose mode holds every dangerous tool (``Bash``) for a person."""
    return agent_make(name="claude", principal="carol", mode="default")


@pytest.fixture
def alice() -> User:
    return user_make(username="alice")


def bash(agent: Agent, arguments: str = PUSH, *, run: str = "r1", at: datetime = T0) -> Call:
    return call_make(agent=agent, tool="Bash", arguments=arguments, run_id=run, now=at)


def approve(call: Call, user: User, scope: str, *, at: datetime = T0) -> Call:
    return call_decide(
        call_id=call.pk,
        user=user,
        approve=True,
        comment="",
        arguments_sha256=call.arguments_sha256,
        scope=scope,
        now=at,
    )


def granted(agent: Agent, alice: User, scope: str) -> None:
    """A held ``git push`` in run r1, approved with ``scope``."""
    held = bash(agent)
    assert held.status == "pending"
    assert approve(held, alice, scope).status == "approved"


LATER = T0 + timedelta(minutes=5)


# --- what each scope lets through ------------------------------------------------------------


def test_once_grants_nothing_more(agent: Agent, alice: User) -> None:
    granted(agent, alice, "once")
    assert bash(agent, at=LATER).status == "pending"
    assert not PermissionRule.objects.exists()


def test_run_same_allows_only_these_exact_arguments_in_this_run(agent: Agent, alice: User) -> None:
    granted(agent, alice, "run_same")
    assert bash(agent, at=LATER).status == "allowed"
    # The newcomer's case: the same run and tool, other arguments, held for a person again.
    assert bash(agent, WIPE, at=LATER).status == "pending"
    # The same text with a blank more is other arguments too.
    assert bash(agent, PUSH.replace(":", ": "), at=LATER).status == "pending"
    assert bash(agent, run="r2", at=LATER).status == "pending"
    assert (
        call_make(agent=agent, tool="BashOutput", arguments=PUSH, run_id="r1").status == "pending"
    )


def test_run_same_after_an_edit_grants_the_edited_arguments(agent: Agent, alice: User) -> None:
    held = bash(agent, WIPE)
    call_decide(
        call_id=held.pk,
        user=alice,
        approve=True,
        comment="",
        arguments_sha256=held.arguments_sha256,
        scope="run_same",
        arguments=PUSH,
        now=T0,
    )
    assert bash(agent, at=LATER).status == "allowed"
    assert bash(agent, WIPE, at=LATER).status == "pending"
    entry = AuditEntry.objects.get(action=AuditEntry.Action.STANDING_RULE_CREATED)
    assert json.loads(entry.after)["arguments_sha256"] == hashlib.sha256(PUSH.encode()).hexdigest()


def test_run_allows_any_arguments_in_this_run_only(agent: Agent, alice: User) -> None:
    granted(agent, alice, "run")
    assert bash(agent, WIPE, at=LATER).status == "allowed"
    assert bash(agent, WIPE, run="r2", at=LATER).status == "pending"


def test_hour_allows_any_arguments_in_any_run_until_an_hour_after(
    agent: Agent, alice: User
) -> None:
    granted(agent, alice, "hour")
    assert bash(agent, WIPE, run="r2", at=T0 + timedelta(minutes=59)).status == "allowed"
    assert bash(agent, WIPE, run="r3", at=T0 + timedelta(hours=1)).status == "pending"
    assert bash(agent, at=T0 + timedelta(hours=2)).status == "pending"
    other = agent_make(name="other", principal="dave", mode="default")
    assert bash(other, at=LATER).status == "pending"


def test_always_allows_the_tool_for_this_agent_only(agent: Agent, alice: User) -> None:
    granted(agent, alice, "always")
    assert bash(agent, WIPE, run="r9", at=T0 + timedelta(days=30)).status == "allowed"
    other = agent_make(name="other", principal="dave", mode="default")
    assert bash(other, at=LATER).status == "pending"


def test_caps_still_hold_a_granted_tool(agent: Agent, alice: User) -> None:
    held = call_make(agent=agent, tool="pay", arguments=payment("10.00"), run_id="r1", now=T0)
    approve(held, alice, "always")
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    small = call_make(agent=agent, tool="pay", arguments=payment("20.00"), now=LATER)
    assert small.status == "allowed"
    big = call_make(agent=agent, tool="pay", arguments=payment("600.00"), now=LATER)
    assert big.status == "pending"
    assert [reason["rule"] for reason in big.reasons] == ["big"]


def test_budgets_still_refuse_a_granted_tool(agent: Agent, alice: User) -> None:
    granted(agent, alice, "always")
    Budget.objects.create(agent=agent, max_calls=2)
    assert bash(agent, at=LATER).status == "allowed"  # the run's second call
    refused = bash(agent, at=LATER)
    assert refused.status == "refused"
    assert [reason["rule"] for reason in refused.reasons] == ["budget:calls"]


def test_each_grant_is_audited_with_what_it_allows(agent: Agent, alice: User) -> None:
    granted(agent, alice, "hour")
    entry = AuditEntry.objects.get(action=AuditEntry.Action.STANDING_RULE_CREATED)
    assert entry.username == "alice"
    after = json.loads(entry.after)
    assert after["scope"] == "hour"
    assert after["expires_at"] == (T0 + timedelta(hours=1)).isoformat()
    assert "arguments_sha256" not in after  # any arguments


# --- the scope refused --------------------------------------------------------------------


def test_a_scope_beyond_the_call_is_refused_when_not_held_by_the_mode_alone(
    agent: Agent, alice: User
) -> None:
    rule_make(line="big: pay arg=amount max USD 500.00 -> gate")
    held = call_make(agent=agent, tool="pay", arguments=payment("600.00"), now=T0)
    assert {reason["rule"] for reason in held.reasons} == {"big", "mode:default"}
    for scope in ("run_same", "hour"):
        with pytest.raises(BadScope, match=SCOPE_NOT_GRANTABLE):
            approve(held, alice, scope)
    assert not held.approvals.exists()


def test_an_unknown_scope_is_a_400_that_changes_nothing(agent: Agent, alice: User) -> None:
    held = bash(agent)
    entries = AuditEntry.objects.count()
    client = Client()
    client.force_login(alice)
    sent = "forever<b>"
    response = client.post(
        f"/calls/{held.pk}/approve",
        {"arguments_sha256": held.arguments_sha256, "scope": sent, "comment": ""},
    )
    assert response.status_code == 400
    assert response.content.decode() == SCOPE_UNKNOWN
    assert sent not in response.content.decode()
    assert "once, run_same, run, hour, always" in SCOPE_UNKNOWN
    held.refresh_from_db()
    assert held.status == "pending"
    assert not Approval.objects.exists()
    assert not PermissionRule.objects.exists()
    assert AuditEntry.objects.count() == entries


# --- the form --------------------------------------------------------------------------------


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_form_names_the_tool_and_says_exact_or_any_arguments(agent: Agent, alice: User) -> None:
    held = bash(agent)
    client = Client()
    client.force_login(alice)
    page = client.get(f"/calls/{held.pk}/").content.decode()
    fieldset = re.search(r'<fieldset class="scope">.*?</fieldset>', page, re.DOTALL)
    assert fieldset is not None
    labels = [_text(label) for label in re.findall(r"<label>(.*?)</label>", fieldset[0], re.DOTALL)]
    assert labels == [
        "Approve this call",
        "Also allow Bash with these exact arguments for the rest of this run",
        "Also allow Bash with any arguments for the rest of this run",
        "Also allow Bash with any arguments for the next hour",
        "Always allow Bash for this agent",
    ]
    values = re.findall(r'name="scope" value="([a-z_]+)"', fieldset[0])
    assert values == ["once", "run_same", "run", "hour", "always"]
    assert "<strong>these exact arguments</strong>" in fieldset[0]
    assert 'value="once" checked' in fieldset[0]


def test_the_form_posts_the_scope_chosen(agent: Agent, alice: User) -> None:
    held = bash(agent, run="r1", at=timezone.now())
    client = Client()
    client.force_login(alice)
    response = client.post(
        f"/calls/{held.pk}/approve",
        {"arguments_sha256": held.arguments_sha256, "scope": "run_same", "comment": ""},
    )
    assert response.status_code == 303
    rule = PermissionRule.objects.get()
    assert (rule.pattern, rule.run_id, rule.arguments_sha256) == (
        "Bash",
        "r1",
        held.arguments_sha256,
    )
    assert call_make(agent=agent, tool="Bash", arguments=PUSH, run_id="r1").status == "allowed"
    assert call_make(agent=agent, tool="Bash", arguments=WIPE, run_id="r1").status == "pending"


# --- on the agent's admin page ------------------------------------------------------------


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(user_make(username="root", superuser=True))
    return client


def test_the_agents_page_lists_its_grants_with_who_when_and_until(
    agent: Agent, alice: User, admin_client: Client
) -> None:
    now = timezone.now()
    approve(bash(agent, PUSH, run="r2", at=now), alice, "run_same", at=now)
    approve(bash(agent, at=now), alice, "hour", at=now)
    page = admin_client.get(reverse("admin:approvals_agent_change", args=[agent.pk]))
    assert page.status_code == 200
    rows = re.findall(r'<tr class="grant".*?</tr>', page.content.decode(), re.DOTALL)
    assert len(rows) == 2
    hour, same = (_text(row) for row in rows)  # the newest first
    hour_rule = PermissionRule.objects.get(expires_at__isnull=False)
    assert hour_rule.expires_at is not None
    until = timezone.localtime(hour_rule.expires_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    granted_at = timezone.localtime(now, UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert hour.startswith("Bash any arguments every run alice")
    assert granted_at in hour
    assert until in hour
    assert same.startswith("Bash these exact arguments")
    assert "run r2 alice" in same
    assert "until revoked" in same
    assert "Revoke" in same
    # Each Revoke is a form of its own after the agent's: Enter in the agent's form saves it.
    html = page.content.decode()
    agent_form_end = html.index("</form>", html.index('id="agent_form"'))
    revoke = reverse("admin:approvals_agent_revoke_grant", args=[agent.pk, hour_rule.pk])
    assert html.index(f'<form method="post" action="{revoke}">') > agent_form_end


def test_a_grant_expired_is_no_longer_listed(
    agent: Agent, alice: User, admin_client: Client
) -> None:
    approve(bash(agent), alice, "hour")  # at T0, long gone
    page = admin_client.get(reverse("admin:approvals_agent_change", args=[agent.pk]))
    assert '<tr class="grant"' not in page.content.decode()
    assert "No grants" in page.content.decode()


def test_revoking_a_grant_is_audited_and_takes_effect_at_once(
    agent: Agent, alice: User, admin_client: Client
) -> None:
    now = timezone.now()
    approve(bash(agent, at=now), alice, "always", at=now)
    assert bash(agent, WIPE, at=now).status == "allowed"  # the policy is cached now
    rule = PermissionRule.objects.get()
    stamp = policy_stamp_read()
    response = admin_client.post(
        reverse("admin:approvals_agent_revoke_grant", args=[agent.pk, rule.pk])
    )
    assert response.status_code == 303
    assert not PermissionRule.objects.exists()
    assert policy_stamp_read() != stamp
    assert bash(agent, WIPE).status == "pending"
    entry = AuditEntry.objects.get(action=AuditEntry.Action.STANDING_RULE_REVOKED)
    assert (entry.username, entry.object_type, entry.object_id) == (
        "root",
        AuditEntry.ObjectType.PERMISSION_RULE,
        str(rule.pk),
    )
    assert json.loads(entry.before)["pattern"] == "Bash"
    # Revoked once: a second revocation finds nothing and writes nothing.
    admin_client.post(reverse("admin:approvals_agent_revoke_grant", args=[agent.pk, rule.pk]))
    assert AuditEntry.objects.filter(action=AuditEntry.Action.STANDING_RULE_REVOKED).count() == 1


def test_revoking_needs_a_post_and_the_right_to_change_the_agent(
    agent: Agent, alice: User, admin_client: Client
) -> None:
    approve(bash(agent, at=timezone.now()), alice, "always", at=timezone.now())
    rule = PermissionRule.objects.get()
    revoke = reverse("admin:approvals_agent_revoke_grant", args=[agent.pk, rule.pk])
    assert admin_client.get(revoke).status_code == 405
    viewer = user_make(username="viewer")
    viewer.is_staff = True
    viewer.save()
    viewer.user_permissions.add(
        Permission.objects.get(content_type__app_label="approvals", codename="view_agent")
    )
    client = Client()
    client.force_login(viewer)
    assert client.post(revoke).status_code == 403
    assert PermissionRule.objects.filter(pk=rule.pk).exists()
