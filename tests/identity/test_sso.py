"""Single sign-on against a real OpenID provider (conftest.py): people made at their first
login and known by ``sub`` after that, groups set from the claim at every login, the
protocol's checks (state, nonce, one use of a callback), a provider that cannot be used
failing closed, passwords switched off, and the session's end."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEntry, Call, Gate
from identity.models import SsoIdentity
from tests.factories import agent_make, call_make, payment, rule_make, user_make
from tests.identity.conftest import Idp, free_port, sso_login, with_query

pytestmark = pytest.mark.django_db

FAILED = "/accounts/login/?sso=failed"
UNAVAILABLE = "Single sign-on is unavailable"


def signed_in(client: Client) -> User | None:
    """Who ``client``'s session is signed in as, if anyone."""
    pk = client.session.get("_auth_user_id")
    return None if pk is None else User.objects.filter(pk=pk).first()


def test_the_login_page_offers_the_provider_by_name(sso: Idp) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Acme" in page
    assert 'name="password"' in page  # passwords are on unless switched off
    admin_page = Client().get("/admin/login/").content.decode()
    assert "Sign in with Acme" in admin_page


def test_without_an_issuer_there_is_no_single_sign_on(db: None) -> None:
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with" not in page
    assert UNAVAILABLE not in page
    assert Client().get("/sso/login/")["Location"] == "/accounts/login/"


def test_the_first_login_makes_the_person_in_the_groups_the_claim_names(sso: Idp) -> None:
    approvers = Group.objects.create(name="approvers")
    Group.objects.create(name="auditors")
    sso.account(
        "u-1",
        preferred_username="alice",
        email="alice@example.com",
        groups=[
            "approvers",
            "not-a-group-here",
        ],
    )
    client = Client()
    response = sso_login(client, "u-1")
    assert response.status_code == 302
    assert response["Location"] == "/"
    alice = User.objects.get(username="alice")
    assert signed_in(client) == alice
    assert alice.email == "alice@example.com"
    assert list(alice.groups.all()) == [approvers]
    assert not alice.has_usable_password()
    assert SsoIdentity.objects.get(user=alice).subject == "u-1"
    created = AuditEntry.objects.get(action=AuditEntry.Action.USER_CREATED)
    assert created.object_id == str(alice.pk)


def test_the_subject_is_the_person_whatever_their_name_becomes(sso: Idp) -> None:
    sso.account("u-1", preferred_username="alice", email="alice@example.com")
    sso_login(Client(), "u-1")
    sso.account("u-1", preferred_username="alice.smith", email="alice.smith@example.com")
    client = Client()
    assert sso_login(client, "u-1").status_code == 302
    assert User.objects.count() == 1
    assert signed_in(client) == User.objects.get(username="alice")


def test_a_name_someone_has_already_is_never_their_account(sso: Idp) -> None:
    bob = user_make(username="bob")
    sso.account("u-2", preferred_username="bob", email="bob@example.com")
    client = Client()
    sso_login(client, "u-2")
    newcomer = signed_in(client)
    assert newcomer is not None
    assert newcomer != bob
    assert newcomer.username == "bob-2"


def test_without_a_preferred_username_the_email_names_them(sso: Idp) -> None:
    sso.account("u-3", email="carol.jones@example.com")
    client = Client()
    sso_login(client, "u-3")
    person = signed_in(client)
    assert person is not None
    assert person.username == "carol.jones"


def _decide_form_shown(client: Client, call: Call) -> bool:
    page = client.get(f"/calls/{call.pk}/")
    return page.status_code == 200 and 'name="arguments_sha256"' in page.content.decode()


def test_groups_follow_the_claim_and_a_dropped_group_ends_approving(sso: Idp) -> None:
    rule_make(line="wire: wire arg=amount max USD 100.00 -> gate treasury")
    treasury = Group.objects.create(name="treasury")
    treasury.permissions.add(Permission.objects.get(codename="decide_call"))
    Gate.objects.filter(name="treasury").update(group=treasury)
    call = call_make(agent=agent_make(), arguments=payment("200.00"), tool="wire")
    assert call.status == Call.Status.PENDING

    sso.account("u-1", preferred_username="alice", groups=["treasury"])
    client = Client()
    sso_login(client, "u-1")
    assert _decide_form_shown(client, call)

    sso.account("u-1", preferred_username="alice", groups=[])
    later = Client()
    sso_login(later, "u-1")
    alice = User.objects.get(username="alice")
    assert not alice.groups.exists()
    assert not _decide_form_shown(later, call)
    refused = later.post(f"/calls/{call.pk}/approve", {"arguments_sha256": call.arguments_sha256})
    assert refused.status_code == 403
    call.refresh_from_db()
    assert call.status == Call.Status.PENDING
    changed = AuditEntry.objects.filter(
        action=AuditEntry.Action.USER_GROUPS_CHANGED, object_id=str(alice.pk)
    )
    assert changed.count() == 2  # put in treasury, then taken out


def test_a_tampered_state_signs_nobody_in(sso: Idp) -> None:
    sso.account("u-1", preferred_username="alice")
    client = Client()
    response = sso_login(client, "u-1", callback=with_query(state="not-the-state"))
    assert response["Location"] == FAILED
    assert signed_in(client) is None
    assert not User.objects.exists()


def test_a_tampered_nonce_signs_nobody_in(sso: Idp) -> None:
    sso.account("u-1", preferred_username="alice")
    client = Client()
    response = sso_login(client, "u-1", authorize=with_query(nonce="not-the-nonce"))
    assert response["Location"] == FAILED
    assert signed_in(client) is None
    assert not User.objects.exists()


def test_a_callback_is_used_once(sso: Idp) -> None:
    sso.account("u-1", preferred_username="alice")
    client = Client()
    seen: list[str] = []

    def keep(url: str) -> str:
        seen.append(url)
        return url

    assert sso_login(client, "u-1", callback=keep)["Location"] == "/"
    client.logout()
    replayed = client.get("/sso/callback/" + seen[0].partition("/sso/callback/")[2])
    assert replayed["Location"] == FAILED
    assert signed_in(client) is None
    elsewhere = Client()
    replayed = elsewhere.get("/sso/callback/" + seen[0].partition("/sso/callback/")[2])
    assert replayed["Location"] == FAILED
    assert signed_in(elsewhere) is None


def test_a_provider_that_cannot_be_reached_fails_closed(sso: Idp, settings: Any) -> None:
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    ready = Client().get("/readyz")
    assert ready.status_code == 503
    assert "sso" in ready.json()["unavailable"]
    page = Client().get("/accounts/login/").content.decode()
    assert UNAVAILABLE in page
    assert "Sign in with Acme" not in page
    client = Client()
    assert client.get("/sso/login/")["Location"] == "/accounts/login/"
    response = client.get("/sso/callback/", {"code": "a-code", "state": "a-state"})
    assert response["Location"] == FAILED
    assert signed_in(client) is None
    assert not User.objects.exists()


def test_a_discovery_document_of_another_issuer_is_refused(sso: Idp, settings: Any) -> None:
    # The same provider under another name: its document names 127.0.0.1, not localhost.
    settings.OIDC_ISSUER = sso.issuer.replace("127.0.0.1", "localhost")
    assert Client().get("/readyz").status_code == 503
    assert UNAVAILABLE in Client().get("/admin/login/").content.decode()


def test_readyz_checks_the_provider(sso: Idp) -> None:
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert "sso" in ready.json()["checked"]


def test_with_passwords_off_neither_login_page_takes_one(sso: Idp, settings: Any) -> None:
    settings.COUNTERSIGN_PASSWORD_LOGIN = False
    user_make(username="root", superuser=True)
    for path in ("/accounts/login/", "/admin/login/"):
        client = Client()
        page = client.get(path).content.decode()
        assert "Sign in with Acme" in page
        assert 'name="password"' not in page
        posted = client.post(path, {"username": "root", "password": "pw"})
        assert posted.status_code == 403
        assert "Password login is off" in posted.content.decode()
        assert signed_in(client) is None


def test_an_sso_session_ends_within_the_hours_set(sso: Idp, settings: Any) -> None:
    settings.COUNTERSIGN_SSO_SESSION_HOURS = 1
    sso.account("u-1", preferred_username="alice")
    client = Client()
    sso_login(client, "u-1")
    ends = client.session.get_expiry_date()
    assert timezone.now() < ends <= timezone.now() + timedelta(hours=1)
    # A password login keeps Django's two weeks.
    user_make(username="bob")
    password = Client()
    password.post("/accounts/login/", {"username": "bob", "password": "pw"})
    assert password.session.get_expiry_date() > timezone.now() + timedelta(days=13)


def test_a_person_deactivated_here_cannot_sign_in(sso: Idp) -> None:
    sso.account("u-1", preferred_username="alice")
    client = Client()
    sso_login(client, "u-1")
    User.objects.filter(username="alice").update(is_active=False)
    assert client.get("/").status_code == 302  # their session has ended
    again = Client()
    assert sso_login(again, "u-1")["Location"] == FAILED
    assert signed_in(again) is None
