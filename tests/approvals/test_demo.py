"""The demo behind `make run`: demo_setup twice keeps its token and every admin edit, stops on a
taken port, makes an admin who can use the admin (people and groups too); demo_agent finds the
server, reacts to a real approval and revokes its tokens."""

from __future__ import annotations

import io
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client as DjangoClient

from approvals.management.commands.demo_agent import STOPPED
from approvals.management.commands.demo_setup import PORT_TAKEN
from approvals.models import Agent, AgentToken, Call, CapRule, Gate
from approvals.services.agents import agent_authenticate, token_digest
from approvals.services.demo import (
    DEMO_ADMIN,
    DEMO_AGENT,
    DEMO_PASSWORD,
    DEMO_TOKEN_FILE,
    DEMO_URL_FILE,
)
from countersign import Client, ServiceUnavailable, protocol
from tests.live import ROOT, Approver, _database_url, free_port, live_server
from tests.scale.test_hostile_sockets import _Form

RULES = Path(__file__).resolve().parents[2] / "examples" / "rules.txt"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def var_dir(tmp_path: Path, settings: Any) -> Path:
    """What make run keeps between runs goes here, not into the checkout's var/."""
    settings.VAR_DIR = tmp_path
    return tmp_path


def setup(url: str | None = None) -> str:
    """demo_setup on a free port (or ``url``); its banner."""
    out = io.StringIO()
    call_command(
        "demo_setup", rules=str(RULES), url=url or f"http://127.0.0.1:{free_port()}", stdout=out
    )
    return out.getvalue()


def printed_token(banner: str) -> str:
    return banner.split("Bearer ", 1)[1].split("'", 1)[0]


def live_tokens(agent: str) -> int:
    return AgentToken.objects.filter(agent__name=agent, revoked_at__isnull=True).count()


@pytest.fixture
def listening() -> Iterator[int]:
    """A port another server is listening on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def test_demo_setup_twice_keeps_one_of_everything_and_the_same_token(var_dir: Path) -> None:
    first = setup()
    url = f"http://127.0.0.1:{free_port()}"
    second = setup(url)
    assert CapRule.objects.filter(enabled=True).count() == 5
    assert Gate.objects.get(name="treasury").required_approvals == 2
    assert f"curl -sS -X POST {url}/api/v1/calls" in second
    assert f"password {DEMO_PASSWORD}" in second
    assert f"{url}/admin/ as {DEMO_ADMIN}" in second
    token = printed_token(first)
    assert printed_token(second) == token
    assert "the one from the last run" in second
    assert live_tokens(DEMO_AGENT) == 1
    found = agent_authenticate(token=token)
    assert found is not None
    assert found.name == DEMO_AGENT
    kept = var_dir / DEMO_TOKEN_FILE
    assert kept.read_text().strip() == token
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert (var_dir / DEMO_URL_FILE).read_text().strip() == url


def test_a_revoked_or_lost_demo_token_is_replaced_and_the_old_ones_revoked(var_dir: Path) -> None:
    first = printed_token(setup())
    AgentToken.objects.filter(digest=token_digest(first)).update(revoked_at="2026-01-01T00:00Z")
    second = printed_token(setup())
    assert second != first
    (var_dir / DEMO_TOKEN_FILE).unlink()
    third = printed_token(setup())
    assert third not in {first, second}
    assert live_tokens(DEMO_AGENT) == 1
    assert agent_authenticate(token=third) is not None


def test_demo_setup_on_a_taken_port_stops_before_any_banner_or_token(
    var_dir: Path, listening: int
) -> None:
    token = printed_token(setup())
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command(
            "demo_setup", rules=str(RULES), url=f"http://127.0.0.1:{listening}", stdout=out
        )
    assert str(refused.value) == PORT_TAKEN.format(
        port=listening, host="127.0.0.1", other=listening + 1
    )
    assert out.getvalue() == ""
    assert (var_dir / DEMO_TOKEN_FILE).read_text().strip() == token
    assert agent_authenticate(token=token) is not None


def test_the_demo_admin_can_use_the_admin_and_the_approvers_are_not_staff() -> None:
    setup()
    admin = DjangoClient()
    assert admin.login(username=DEMO_ADMIN, password=DEMO_PASSWORD)
    assert admin.get("/admin/").status_code == 200
    for model in ("caprule", "gate", "agent", "budget", "toolclass", "permissionrule"):
        assert admin.get(f"/admin/approvals/{model}/").status_code == 200, model
    assert admin.get("/admin/notifications/notificationchannel/").status_code == 200
    line = "demo-admin-cap: pay arg=amount max USD 100.00 -> gate"
    added = admin.post("/admin/approvals/caprule/add/", {"line": line, "enabled": "on"})
    assert added.status_code == 302
    assert CapRule.objects.filter(line=line).exists()
    alice = DjangoClient()
    assert alice.login(username="alice", password=DEMO_PASSWORD)
    assert alice.get("/admin/").status_code == 302  # to the admin's login: not staff
    assert alice.get("/").status_code == 200  # the queue


def admin_form(admin: DjangoClient, path: str, **changes: str | None) -> None:
    """Submit an admin form as its page has it, some fields changed (None: left out, as an
    unticked box is)."""
    page = admin.get(path)
    assert page.status_code == 200, (path, page.status_code)
    form = _Form()
    form.feed(page.content.decode())
    fields = {**form.fields, **changes}
    answer = admin.post(path, {name: value for name, value in fields.items() if value is not None})
    assert answer.status_code == 302, (path, answer.status_code)


def demo_admin() -> DjangoClient:
    admin = DjangoClient()
    assert admin.login(username=DEMO_ADMIN, password=DEMO_PASSWORD)
    return admin


def test_demo_setup_again_keeps_every_edit_an_admin_made(var_dir: Path) -> None:
    token = printed_token(setup())
    admin = demo_admin()
    per_payee = CapRule.objects.get(name="per-payee")
    edited = per_payee.line.replace("USD 5000.00", "USD 7500.00")
    admin_form(admin, f"/admin/approvals/caprule/{per_payee.pk}/change/", line=edited)
    daily = CapRule.objects.get(name="daily-spend")
    admin_form(admin, f"/admin/approvals/caprule/{daily.pk}/change/", enabled=None)
    refunds = CapRule.objects.get(name="refunds")
    admin_form(admin, f"/admin/approvals/caprule/{refunds.pk}/delete/", post="yes")
    treasury = Gate.objects.get(name="treasury")
    finance = Group.objects.create(name="finance-team")
    admin_form(
        admin,
        f"/admin/approvals/gate/{treasury.pk}/change/",
        required_approvals="3",
        group=str(finance.pk),
    )
    intern = Agent.objects.get(name="demo-intern")
    admin_form(admin, f"/admin/approvals/agent/{intern.pk}/change/", mode="default")
    bob = User.objects.get(username="bob")
    admin_form(admin, f"/admin/auth/user/{bob.pk}/change/", is_active=None)
    before = {
        "rules": sorted(CapRule.objects.values_list("name", "line", "enabled")),
        "gates": sorted(Gate.objects.values_list("name", "required_approvals", "group")),
        "modes": sorted(Agent.objects.values_list("name", "mode")),
        "people": sorted(User.objects.values_list("username", "is_active", "is_staff")),
    }

    again = setup()

    assert {
        "rules": sorted(CapRule.objects.values_list("name", "line", "enabled")),
        "gates": sorted(Gate.objects.values_list("name", "required_approvals", "group")),
        "modes": sorted(Agent.objects.values_list("name", "mode")),
        "people": sorted(User.objects.values_list("username", "is_active", "is_staff")),
    } == before
    assert CapRule.objects.get(name="per-payee").line == edited
    assert not CapRule.objects.get(name="daily-spend").enabled
    assert not CapRule.objects.filter(name="refunds").exists()
    assert Gate.objects.get(name="treasury").required_approvals == 3
    assert Agent.objects.get(name="demo-intern").mode == "default"
    assert not User.objects.get(username="bob").is_active
    # The token printed the first time is printed again and still works.
    assert printed_token(again) == token
    found = agent_authenticate(token=token)
    assert found is not None
    assert found.name == DEMO_AGENT


def test_demo_setup_recreates_only_what_is_missing(var_dir: Path) -> None:
    setup()
    User.objects.get(username="alice").delete()
    again = setup()
    alice = User.objects.get(username="alice")
    assert alice.check_password(DEMO_PASSWORD)
    assert alice.has_perm("approvals.decide_call")
    assert not alice.is_staff
    assert "log in as alice or bob" in again
    assert CapRule.objects.count() == 5


def test_the_demo_admin_manages_people_and_groups_but_decides_nothing() -> None:
    setup()
    admin = demo_admin()
    assert admin.get("/admin/auth/user/").status_code == 200
    assert admin.get("/admin/auth/group/").status_code == 200
    alice = User.objects.get(username="alice")
    assert admin.get(f"/admin/auth/user/{alice.pk}/change/").status_code == 200
    admin_form(admin, "/admin/auth/group/add/", name="treasurers")
    assert Group.objects.filter(name="treasurers").exists()
    admin_form(
        admin,
        f"/admin/auth/user/{alice.pk}/change/",
        groups=str(Group.objects.get(name="treasurers").pk),
    )
    assert list(alice.groups.values_list("name", flat=True)) == ["treasurers"]
    held = User.objects.get(username=DEMO_ADMIN)
    assert not held.is_superuser
    assert not held.has_perm("approvals.decide_call")


def test_demo_agent_prints_each_decision_as_it_arrives_and_revokes_its_tokens() -> None:
    setup()
    output = io.StringIO()
    with live_server() as server:

        def approve_the_big_payment() -> None:
            try:
                # Until the agent's deadline at the latest: a loaded machine starts it late.
                for _ in range(300):
                    held = Call.objects.filter(tool="pay", status="pending").first()
                    if held is not None:
                        Approver(server, "alice", DEMO_PASSWORD).decide(
                            str(held.pk), approve=True, comment="fine for the demo"
                        )
                        return
                    time.sleep(0.1)
            finally:
                connection.close()  # this thread's connection, back to the pool

        approver = threading.Thread(target=approve_the_big_payment)
        approver.start()
        call_command("demo_agent", url=server.url, deadline=12, stdout=output)
        approver.join()
    text = output.getvalue()
    assert "submitted pay (under every cap): allowed" in text
    assert "submitted wire (over the wire ceiling): refused" in text
    assert "submitted read_file (held in prompt mode): pending" in text
    assert "submitted refund (not assessable): pending" in text
    assert "pay (held for a cap) -> approved: by alice: fine for the demo" in text
    assert "read_file: still pending after the deadline" in text
    # Only the token make run printed is left.
    assert live_tokens(DEMO_AGENT) == 1
    assert live_tokens("demo-intern") == 0


def test_demo_agent_stopped_by_a_signal_revokes_its_tokens() -> None:
    setup()
    with live_server() as server:
        agent = subprocess.Popen(
            [sys.executable, "manage.py", "demo_agent", "--url", server.url],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": _database_url(), "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert agent.stdout is not None
        for line in agent.stdout:
            if line.startswith("Waiting for decisions"):
                break
        assert live_tokens("demo-intern") == 1
        agent.send_signal(signal.SIGTERM)
        rest, _ = agent.communicate(timeout=20)
    assert agent.returncode == 0
    assert STOPPED in rest
    assert live_tokens(DEMO_AGENT) == 1  # the one make run printed
    assert live_tokens("demo-intern") == 0


def test_demo_agent_goes_to_the_url_make_run_kept_and_names_it_when_it_is_not_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(protocol, "BACKOFF_BASE", 0.001)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there once setup is done
    setup(url)
    before = set(AgentToken.objects.values_list("pk", flat=True))
    with pytest.raises(CommandError) as failed:
        call_command("demo_agent", stdout=io.StringIO())
    assert f"ConnectError at {url}" in str(failed.value)
    issued = AgentToken.objects.exclude(pk__in=before)
    assert issued.count() == 2
    assert not issued.filter(revoked_at__isnull=True).exists()


def test_the_client_names_the_url_it_could_not_reach_and_never_the_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(protocol, "BACKOFF_BASE", 0.001)
    url = f"http://127.0.0.1:{free_port()}"
    token = "cs_never-in-an-error-message"
    with Client(url, token) as client, pytest.raises(ServiceUnavailable) as failed:
        client.submit("pay", "{}")
    assert f"ConnectError at {url}" in str(failed.value)
    assert token not in str(failed.value)
    with_password = url.replace("://", "://someone:hunter2@")
    with Client(with_password, token) as client, pytest.raises(ServiceUnavailable) as failed:
        client.submit("pay", "{}")
    assert f"ConnectError at {url}" in str(failed.value)
    assert "hunter2" not in str(failed.value)
