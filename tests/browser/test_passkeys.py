"""Passkeys in Chromium with a virtual authenticator (the DevTools protocol's ``WebAuthn``):
alice adds one on /account/, signs in with it, and approves a call at a passkey gate through
the button; the decision posted without a valid assertion for it is a 403 that leaves the
call pending (docs/identity.md, "Passkeys" and "Step-up at a gate")."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from io import StringIO
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from django.core.management import call_command
from django.test import override_settings
from playwright.sync_api import expect

from approvals.models import AuditEntry, Gate
from identity.models import PasskeyChallenge
from tests.browser.conftest import PASSWORD, Browsing, Screenshot, agent_client, wait_live
from tests.factories import rule_make, user_make
from tests.live import LiveServer, free_port, start_server

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, CDPSession, Page

PAYMENT = '{"amount": "25000.00", "payee": "ACME Corp"}'
_agent: tuple[LiveServer, httpx.Client] | None = None


@pytest.fixture
def server(transactional_db: None, browser: Any) -> Iterator[LiveServer]:
    """The live server as ``localhost``: an IP address cannot be a relying party id."""
    port = free_port()
    running = start_server(port, {"COUNTERSIGN_PUBLIC_URL": f"http://localhost:{port}"})
    running.url = f"http://localhost:{port}"
    try:
        yield running
    finally:
        running.stop()


def authenticator(page: Page) -> tuple[CDPSession, str]:
    """A platform authenticator with resident keys and user verification, always verified."""
    session = page.context.new_cdp_session(page)
    session.send("WebAuthn.enable")
    added = session.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )
    return session, added["authenticatorId"]


def held_call(server: LiveServer) -> str:
    """A payment held at the treasury gate, by the one agent."""
    global _agent
    if _agent is None or _agent[0] is not server:
        _agent = (server, agent_client(server, "treasury-bot"))
    http = _agent[1]
    held = http.post("/api/v1/calls", json={"tool": "pay", "arguments": PAYMENT}).json()
    assert held["status"] == "pending"
    return str(held["id"])


def _post(page: Page, url: str, fields: dict[str, str]) -> tuple[int, str]:
    """A POST from the page, with its CSRF token, as the form would send it."""
    answer: dict[str, Any] = page.evaluate(
        """async ([url, fields]) => {
            const body = new URLSearchParams(fields);
            body.set("csrfmiddlewaretoken",
                     document.querySelector("input[name=csrfmiddlewaretoken]").value);
            const r = await fetch(url, {method: "POST", body, credentials: "same-origin"});
            return {status: r.status, text: await r.text()};
        }""",
        [url, fields],
    )
    return int(answer["status"]), str(answer["text"])


def assertion(page: Page, call_id: str, digest: str, verb: str) -> dict[str, str]:
    """A step-up assertion made in the page for ``call_id``/``digest``/``verb``."""
    made: dict[str, str] = page.evaluate(
        """async ([callId, digest, verb]) => {
            const body = new URLSearchParams({arguments_sha256: digest});
            body.set("csrfmiddlewaretoken",
                     document.querySelector("input[name=csrfmiddlewaretoken]").value);
            const r = await fetch(`/calls/${callId}/passkey/${verb}`,
                                  {method: "POST", body, credentials: "same-origin"});
            const answer = await r.json();
            const credential = await navigator.credentials.get({
                publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(answer.options)});
            return {passkey_nonce: answer.nonce,
                    passkey_credential: JSON.stringify(credential.toJSON())};
        }""",
        [call_id, digest, verb],
    )
    return made


def add_passkey(page: Page, name: str) -> None:
    page.goto("/account/")
    page.get_by_label("Name").fill(name)
    page.get_by_role("button", name="Add a passkey").click()
    expect(page.locator("table.passkeys")).to_contain_text(name)


def test_alice_adds_a_passkey_signs_in_with_it_and_approves_at_a_passkey_gate(
    browsing: Browsing, server: LiveServer, screenshot: Screenshot
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="huge: pay arg=amount max USD 10000 -> gate treasury")
    Gate.objects.filter(name="treasury").update(require_passkey=True)
    context: BrowserContext = browsing.person()
    page = browsing.tab(context)
    authenticator(page)
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    wait_live(page)

    add_passkey(page, "Laptop")
    expect(page.locator("table.passkeys")).to_contain_text("never")
    assert AuditEntry.objects.filter(action="passkey added", username="alice").count() == 1

    # Signed out, then in again with the passkey alone.
    page.get_by_role("button", name="Log out").click()
    page.goto("/accounts/login/")
    page.get_by_role("button", name="Sign in with a passkey").click()
    page.wait_for_url(f"{server.url}/")
    wait_live(page)
    page.goto("/account/")
    expect(page.locator("table.passkeys")).not_to_contain_text("never")
    screenshot(page, "account")

    call_id = held_call(server)
    page.goto(f"/calls/{call_id}/")
    wait_live(page)
    expect(page.locator(".passkey-note")).to_contain_text("requires a passkey")
    digest = page.locator("input[name=arguments_sha256]").input_value()

    # Without an assertion, or with one for another verb, digest or call: 403, still pending.
    approve = f"/calls/{call_id}/approve"
    status, text = _post(page, approve, {"arguments_sha256": digest})
    assert (status, "requires a passkey" in text) == (403, True)
    other = held_call(server)  # the same arguments, so the same digest
    for fields in (
        assertion(page, call_id, digest, "deny"),
        assertion(page, call_id, "0" * 64, "approve"),
        assertion(page, other, digest, "approve"),
    ):
        status, _ = _post(page, approve, {"arguments_sha256": digest, **fields})
        assert status == 403
    # Replayed: the other call approved with its assertion, which then opens nothing more.
    made = assertion(page, other, digest, "approve")
    status, _ = _post(page, f"/calls/{other}/approve", {"arguments_sha256": digest, **made})
    assert status == 200  # the redirect to the call page, followed
    status, text = _post(page, approve, {"arguments_sha256": digest, **made})
    assert status == 403
    status, text = _post(page, f"/calls/{other}/approve", {"arguments_sha256": digest, **made})
    assert (status, "used already or expired" in text) == (403, True)
    # Expired.
    made = assertion(page, call_id, digest, "approve")
    PasskeyChallenge.objects.filter(nonce=made["passkey_nonce"]).update(
        expires_at="2000-01-01T00:00:00Z"
    )
    status, _ = _post(page, approve, {"arguments_sha256": digest, **made})
    assert status == 403
    page.reload()
    wait_live(page)
    expect(page.locator(".live .badge")).to_have_text("pending")

    # Through the button: the ceremony runs, the assertion goes with the form.
    page.get_by_label("Comment").fill("Quarterly payment, checked with finance.")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".audit")).to_contain_text("call approved by alice with a passkey")
    expect(page.locator(".live .badge")).to_have_text("approved")
    screenshot(page, "passkey-approval")
    entry = AuditEntry.objects.get(action="call approved", object_id=call_id)
    kept = json.loads(entry.after)
    assert kept["comment"] == "Quarterly payment, checked with finance."
    assert set(kept["passkey"]) == {
        "credential_id",
        "arguments_sha256",
        "nonce",
        "authenticator_data",
        "client_data_json",
        "signature",
    }
    # Chromium's assertion verifies again from the entry alone (manage.py passkey_verify).
    with override_settings(COUNTERSIGN_PUBLIC_URL=server.url):
        out = StringIO()
        call_command("passkey_verify", "--call", call_id, stdout=out)
    assert out.getvalue().endswith(
        f"call approved {call_id} by alice: verified\n1 passkey assertion verified\n"
    )


def test_without_the_authenticator_the_approval_cannot_complete_and_removal_is_audited(
    browsing: Browsing, server: LiveServer
) -> None:
    user_make(username="alice", password=PASSWORD)
    rule_make(line="huge: pay arg=amount max USD 10000 -> gate treasury")
    Gate.objects.filter(name="treasury").update(require_passkey=True)
    page = browsing.logged_in("alice")
    session, authenticator_id = authenticator(page)
    add_passkey(page, "Laptop")

    session.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": authenticator_id})
    call_id = held_call(server)
    page.goto(f"/calls/{call_id}/")
    wait_live(page)
    digest = page.locator("input[name=arguments_sha256]").input_value()
    # The browser finds no authenticator: the ceremony yields no assertion (the test stops
    # waiting for one after a few seconds), and without one the decision is refused.
    outcome = page.evaluate(
        """async ([callId, digest]) => {
            const body = new URLSearchParams({arguments_sha256: digest});
            body.set("csrfmiddlewaretoken",
                     document.querySelector("input[name=csrfmiddlewaretoken]").value);
            const r = await fetch(`/calls/${callId}/passkey/approve`,
                                  {method: "POST", body, credentials: "same-origin"});
            const answer = await r.json();
            const stop = new AbortController();
            setTimeout(() => stop.abort(), 3000);
            try {
                await navigator.credentials.get({signal: stop.signal,
                    publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(answer.options)});
                return "assertion";
            } catch (error) { return "none"; }
        }""",
        [call_id, digest],
    )
    assert outcome == "none"
    status, _ = _post(page, f"/calls/{call_id}/approve", {"arguments_sha256": digest})
    assert status == 403
    page.reload()
    expect(page.locator(".live .badge")).to_have_text("pending")

    page.goto("/account/")
    page.get_by_role("button", name="Remove Laptop").click()
    expect(page.locator(".account")).to_contain_text("You have no passkey yet.")
    assert AuditEntry.objects.filter(action="passkey removed", username="alice").count() == 1
    page.goto(f"/calls/{call_id}/")
    expect(page.locator(".passkey-note")).to_contain_text("you have none")
    assert re.search("add one", page.locator(".passkey-note").inner_text())
