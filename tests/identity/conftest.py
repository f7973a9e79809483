"""A real OpenID provider for the single sign-on tests: oidc-provider (OpenID-certified) under
Node, from tests/identity/oidc_provider/ (``npm ci`` there first if its modules are missing),
one process for the whole run.

A test names the accounts and their claims (``Idp.account``), and signs someone in with
``sso_login``: Django's test client asks ``/sso/login/`` where to go, a client of the provider
follows its redirects (the provider signs in the account named by ``login_hint``), and the
callback it ends at is handed back to Django's test client.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import pytest
from django.test import Client

from identity.discovery import sso_forget

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as TestResponse

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc_provider"
PUBLIC_URL = "http://testserver"
CALLBACK = f"{PUBLIC_URL}/sso/callback/"
CLIENT_ID = "countersign"
CLIENT_SECRET = "a-secret-for-the-tests"
START_SECONDS = 30
NPM_CI_SECONDS = 300
MAX_REDIRECTS = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _node_modules() -> None:
    if (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed for the OpenID provider the SSO tests run")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=PROVIDER_DIR,
        check=True,
        timeout=NPM_CI_SECONDS,
    )


@dataclass
class Idp:
    issuer: str
    accounts_file: Path

    def account(self, sub: str, **claims: Any) -> None:
        """Set ``sub``'s claims (others' are kept); the provider reads them at each use."""
        accounts = json.loads(self.accounts_file.read_text())
        accounts[sub] = claims
        self.accounts_file.write_text(json.dumps(accounts))

    def forget_accounts(self) -> None:
        self.accounts_file.write_text("{}")


@pytest.fixture(scope="session")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Idp]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed for the OpenID provider the SSO tests run")
    _node_modules()
    accounts = tmp_path_factory.mktemp("idp") / "accounts.json"
    accounts.write_text("{}")
    port = free_port()
    log = accounts.parent / "provider.log"
    env = {
        **os.environ,
        "PORT": str(port),
        "CLIENT_ID": CLIENT_ID,
        "CLIENT_SECRET": CLIENT_SECRET,
        "REDIRECT_URI": CALLBACK,
        "ACCOUNTS": str(accounts),
    }
    with log.open("w") as output:
        process = subprocess.Popen(
            [node, "server.mjs"], cwd=PROVIDER_DIR, env=env, stdout=output, stderr=output
        )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"the OpenID provider stopped: {log.read_text()}")
            try:
                httpx.get(
                    f"{issuer}/.well-known/openid-configuration", timeout=1
                ).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the OpenID provider did not start: {log.read_text()}")
                time.sleep(0.1)
        yield Idp(issuer=issuer, accounts_file=accounts)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def sso(settings: Any, idp: Idp) -> Iterator[Idp]:
    """Single sign-on with the provider, its accounts empty; "Acme" on the button."""
    settings.OIDC_ISSUER = idp.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_NAME = "Acme"
    settings.OIDC_GROUPS_CLAIM = "groups"
    settings.OIDC_SCOPES = "openid email profile groups"
    settings.COUNTERSIGN_PUBLIC_URL = PUBLIC_URL
    idp.forget_accounts()
    sso_forget()
    yield idp
    sso_forget()


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


Tamper = Callable[[str], str]


def provider_redirects(authorize_url: str) -> str:
    """Follow the provider's redirects from ``authorize_url``, as a browser new to it would,
    to the callback it sends the browser to."""
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        url = authorize_url
        for _ in range(MAX_REDIRECTS):
            response = browser.get(url)
            assert response.is_redirect, response.text
            url = urljoin(url, response.headers["Location"])
            if url.startswith(CALLBACK):
                return url
    raise AssertionError("the provider never sent the browser back")


def sso_login(
    client: Client,
    sub: str,
    *,
    authorize: Tamper | None = None,
    callback: Tamper | None = None,
) -> TestResponse:
    """Sign ``sub`` in through the provider with Django's test ``client``; ``authorize`` and
    ``callback`` may change the URLs on the way, as an attacker would. The callback's answer."""
    start = client.get("/sso/login/", {"next": "/"})
    assert start.status_code == 302, start
    authorize_url = _with_query(start["Location"], login_hint=sub)
    if authorize is not None:
        authorize_url = authorize(authorize_url)
    callback_url = provider_redirects(authorize_url)
    if callback is not None:
        callback_url = callback(callback_url)
    parts = urlsplit(callback_url)
    response: TestResponse = client.get(parts.path, dict(parse_qsl(parts.query)))
    return response


def with_query(**changes: str) -> Tamper:
    return lambda url: _with_query(url, **changes)
