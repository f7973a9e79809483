"""Countersign's files are its owner's alone (config/private_files.py; docs/reliability.md,
"Private files"): a fresh var directory is made 0700 and the database, its -wal and -shm and
the secret key 0600 by a real ``migrate``, whatever the umask; an existing one with loose modes
is tightened; what cannot be tightened is named by a system check."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from approvals.ops import checks
from config import private_files
from config.private_files import private_directory
from config.private_files import private_files as tighten_files

ROOT = Path(__file__).resolve().parents[2]
LOOSEST_UMASK = 0o000  # files and directories would be made world-writable

# Writes a session through Django and, while its connection is open, prints
# the mode of every file of the var directory (the -wal and -shm exist only while it is open).
HOLD_AND_LIST = """
import os, sys
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
SessionStore().create()
var = settings.VAR_DIR
for name in sorted(os.listdir(var)):
    print(name, oct(os.stat(var / name).st_mode & 0o777))
"""


def _env(var_dir: Path) -> dict[str, str]:
    """A server's environment with nothing but the var directory chosen: the embedded SQLite
    database and a generated secret key."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "SECRET_KEY", "COUNTERSIGN_TEST_RUN")
    }
    return {**env, "COUNTERSIGN_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "config.settings"}


def _manage(var_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_env(var_dir),
        umask=LOOSEST_UMASK,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _modes_listed(output: str) -> dict[str, int]:
    modes = {}
    for line in output.splitlines():
        name, _, mode = line.partition(" ")
        if mode.startswith("0o"):
            modes[name] = int(mode, 8)
    return modes


def test_a_fresh_var_directory_and_its_files_are_the_owners_alone(tmp_path: Path) -> None:
    var = tmp_path / "var"
    _manage(var, "migrate", "--noinput", "-v0")
    assert _mode(var) == 0o700
    assert _mode(var / "db.sqlite3") == 0o600
    assert _mode(var / "secret_key") == 0o600
    listed = _modes_listed(_manage(var, "shell", "-v0", "-c", HOLD_AND_LIST))
    assert {"db.sqlite3", "db.sqlite3-shm", "db.sqlite3-wal", "secret_key"} <= set(listed)
    # Every file Countersign wrote there (keys included), not the static files' directory.
    files = {name: mode for name, mode in listed.items() if not (var / name).is_dir()}
    assert files == dict.fromkeys(files, 0o600)


@pytest.fixture
def open_database(tmp_path: Path) -> Iterator[Path]:
    """A var directory as an older version left it: migrated, then made world-readable, with
    its database open (so its -wal and -shm exist, made by SQLite with the database's mode)
    and a key file beside it."""
    var = tmp_path / "var"
    _manage(var, "migrate", "--noinput", "-v0")
    os.chmod(var, 0o755)
    (var / "another.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    for path in var.iterdir():
        if path.is_file():
            os.chmod(path, 0o644)
    held = sqlite3.connect(var / "db.sqlite3")
    held.execute("PRAGMA journal_mode=WAL")
    held.execute("CREATE TABLE held (x)")
    held.commit()
    try:
        yield var
    finally:
        held.close()


def test_an_existing_var_directory_with_loose_modes_is_tightened_at_start(
    open_database: Path,
) -> None:
    var = open_database
    assert _mode(var / "db.sqlite3-wal") == _mode(var / "db.sqlite3-shm") == 0o644
    output = _manage(var, "migrate", "--noinput")
    assert _mode(var) == 0o700
    files = {path.name: _mode(path) for path in var.iterdir() if path.is_file()}
    assert {"db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm", "secret_key", "another.key"} <= set(
        files
    )
    assert files == dict.fromkeys(files, 0o600)
    assert "countersign.W002" not in output


def test_an_sqlite_database_outside_the_var_directory_is_created_private(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "data" / "countersign.sqlite3"
    env = {**_env(tmp_path / "var"), "DATABASE_URL": f"sqlite:///{elsewhere}"}
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        umask=LOOSEST_UMASK,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _mode(elsewhere.parent) == 0o700
    assert _mode(elsewhere) == 0o600


def test_files_of_another_user_are_left_alone_and_named_by_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    var = tmp_path / "var"
    var.mkdir()
    os.chmod(var, 0o755)
    key = var / "secret_key"
    key.write_text("kept")
    os.chmod(key, 0o644)
    database = tmp_path / "db.sqlite3"
    database.touch()
    os.chmod(database, 0o640)
    # As if Countersign ran as another user than the one who owns them.
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    private_directory(var)
    tighten_files(var)
    private_files.private_sqlite(database)
    assert (_mode(var), _mode(key), _mode(database)) == (0o755, 0o644, 0o640)
    with override_settings(VAR_DIR=var, SQLITE_DATABASE=database):
        [warning] = checks.private_files_check()
    assert warning.id == "countersign.W002"
    assert warning.msg == checks.LOOSE_FILES.format(paths=f"{var}, {key}, {database}")


def test_the_check_is_quiet_when_every_file_is_private(tmp_path: Path) -> None:
    var = tmp_path / "var"
    private_directory(var)
    (var / "secret_key").write_text("kept")
    tighten_files(var)
    with override_settings(VAR_DIR=var, SQLITE_DATABASE=None):
        assert checks.private_files_check() == []
