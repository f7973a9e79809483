"""The client is its own distribution, ``countersign-client`` (the package index's
``countersign`` is another project), which the server requires: ``pip install ./clients/python``
into a fresh virtualenv brings the import package ``countersign`` with httpx, websockets and
joserfc and nothing of the server (no Django, no top-level package but ``countersign`` and its
dependencies'); an agent run from there is approved at the approver's form and goes on; and
``mypy --strict`` on the agent's file, with the package as installed there, passes
(``py.typed``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.factories import agent_with_token, rule_make, user_make
from tests.live import ROOT, Approver, live_server

CLIENT = ROOT / "clients" / "python"
VENV = ROOT / "var" / "client-venv"
# pip's cache for these runs: the first one downloads httpx and websockets, later ones do not.
PIP_CACHE = ROOT / "var" / "client-venv-pip-cache"
VENV_PYTHON = VENV / "bin" / "python"
# What a new virtualenv holds before anything is installed into it.
BASELINE = frozenset({"pip", "setuptools"})
TOKEN = "cs_distribution-agent-0123456789"
DISTRIBUTION = "countersign-client"
WAIT = 60.0  # a guard against hangs, not a measure

AGENT = '''\
"""An agent that pays, gated by Countersign: a user's file, typed as a user would type it."""

from __future__ import annotations

from countersign import Client, NotApproved

client = Client()  # COUNTERSIGN_URL and COUNTERSIGN_TOKEN


@client.gated("pay", deadline=30, context="Paying the November invoice")
def pay(amount: str, currency: str) -> str:
    return f"paid {currency} {amount}"


def main() -> int:
    try:
        print(pay("1250.00", "USD"))
    except NotApproved as no:
        print(f"not paid: {no}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''

# The same client misused: mypy must see the gated function's own signature through the
# decorator, and the exception's attributes.
MISUSED = """\
from __future__ import annotations

from countersign import Client, TimedOut

client = Client("http://127.0.0.1:8000", "cs_token")


@client.gated("pay")
def pay(amount: str) -> str:
    return amount


pay(1250)
cancelled: str = TimedOut("x", call_id="c", cancelled=True).cancelled
"""

# Run in the fresh venv: each installed distribution's top-level names and requirements, and
# what its site-packages holds.
REPORT = """\
import importlib.metadata as metadata, json, sysconfig
from pathlib import Path

site = Path(sysconfig.get_paths()["purelib"])
dists = {}
for dist in metadata.distributions():
    files = [Path(str(f)) for f in dist.files or []]
    top = sorted({f.parts[0] for f in files if f.parts[0] != ".."})
    dists[dist.metadata["Name"]] = {"top": top, "requires": dist.requires or []}
print(json.dumps({"dists": dists, "entries": sorted(p.name for p in site.iterdir())}))
"""


def pip_install_client() -> None:
    """A new virtualenv, then the documented install line, as a user would run it."""
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=WAIT)
    subprocess.run(
        [str(VENV_PYTHON), "-m", "pip", "install", "--quiet", str(CLIENT)],
        env={**os.environ, "PIP_CACHE_DIR": str(PIP_CACHE), "PYTHONWARNINGS": "ignore"},
        cwd=VENV,
        check=True,
        timeout=WAIT * 2,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def venv() -> Path:
    pip_install_client()
    return VENV_PYTHON


def in_venv(python: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """Run the venv's Python away from this repository, so it can import only what the venv
    installed."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV"} and not k.startswith("COUNTERSIGN_")
    }
    return subprocess.run(
        [str(python), *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def closure(dists: dict[str, dict[str, Any]], name: str) -> set[str]:
    """``name`` and every distribution it requires, without extras, for this interpreter."""
    requires = {canonicalize_name(key): value["requires"] for key, value in dists.items()}
    found: set[str] = set()
    todo = [canonicalize_name(name)]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        for line in requires[current]:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return found


def test_the_server_requires_the_client_by_its_own_name() -> None:
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert client["name"] == DISTRIBUTION
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    requirements = {str(canonicalize_name(r.name)): r for r in map(Requirement, server)}
    assert "countersign" not in requirements  # the package index's, another project
    assert Version(client["version"]) in requirements[DISTRIBUTION].specifier


def test_the_client_installs_alone_without_the_server(venv: Path, tmp_path: Path) -> None:
    django = in_venv(venv, "-c", "import django", cwd=tmp_path)
    assert django.returncode == 1
    assert "No module named 'django'" in django.stderr
    where = in_venv(venv, "-c", "import countersign; print(countersign.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(VENV))  # the installed copy, not this checkout

    report = json.loads(in_venv(venv, "-c", REPORT, cwd=tmp_path).stdout)
    dists = report["dists"]
    installed = {canonicalize_name(name) for name in dists}
    assert installed == BASELINE | closure(dists, DISTRIBUTION)
    assert closure(dists, DISTRIBUTION) >= {"httpx", "websockets", "joserfc"}
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    servers_own = {canonicalize_name(Requirement(line).name) for line in server}
    # The client itself, and what it needs too: httpx (with h11), websockets, and joserfc with
    # cryptography, which verify receipts.
    shared = {DISTRIBUTION, "httpx", "h11", "websockets", "joserfc", "cryptography"}
    assert installed & servers_own <= shared
    assert "django" not in installed

    (ours,) = (value for name, value in dists.items() if canonicalize_name(name) == DISTRIBUTION)
    assert [top for top in ours["top"] if not top.endswith(".dist-info")] == ["countersign"]
    owned = {top for value in dists.values() for top in value["top"]} | {"__pycache__"}
    assert set(report["entries"]) <= owned  # nothing in site-packages that nobody installed
    assert {"config", "approvals", "capcore"}.isdisjoint(report["entries"])


def test_an_agent_run_from_the_fresh_venv_is_approved_and_goes_on(
    venv: Path, tmp_path: Path, transactional_db: None
) -> None:
    agent_with_token(token=TOKEN, name="packaged", mode="default")
    rule_make(line="per-payment: pay arg=amount currency=currency max USD 500.00 -> gate")
    user_make(username="alice")
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    with live_server() as server:
        approving = threading.Thread(target=approve_first_held, args=(server,))
        approving.start()
        try:
            done = in_venv(
                venv,
                str(script),
                cwd=tmp_path,
                env={"COUNTERSIGN_URL": server.url, "COUNTERSIGN_TOKEN": TOKEN},
            )
        finally:
            approving.join(timeout=WAIT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "paid USD 1250.00\n"


def approve_first_held(server: Any) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answer = httpx.get(f"{server.url}/api/v1/calls?status=pending", headers=headers)
        if items := answer.json()["items"]:
            approver = Approver(server, "alice", "pw")
            try:
                approver.decide(items[0]["id"], approve=True, comment="invoice checked")
            finally:
                approver.close()
            return
        time.sleep(0.1)


def test_mypy_strict_passes_on_a_users_file_against_the_installed_client(
    venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "misused.py").write_text(MISUSED)
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\n")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--python-executable",
            str(venv),  # the packages it sees are the fresh venv's, as installed
            "--cache-dir",
            str(ROOT / "var" / "client-venv-mypy-cache"),
            "agent.py",
            "misused.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert not [line for line in errors if line.startswith("agent.py")], checked.stdout
    assert [line.split(": error: ")[0] for line in errors] == ["misused.py:13", "misused.py:14"]
