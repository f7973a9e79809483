"""Countersign's own files, readable by their owner only.

The var directory holds the embedded database (session keys, password hashes, the agents'
token digests), the secret key, signing keys and the demo's token: a local user who can read
any of them can sign in as anyone. So the directory is created ``0700`` and every file of
ours in it is made ``0600``, whatever the umask; an existing directory or file with looser
modes (from an older version, or a copy) is tightened when it is ours. What cannot be
tightened (another user's file, a read-only mount) is left as it is, and the system check
``countersign.W002`` (``approvals/ops/checks.py``) names it.

An SQLite database elsewhere (``DATABASE_URL=sqlite:////srv/...``) gets the same: the file is
created ``0600`` before SQLite opens it, and SQLite gives its ``-wal`` and ``-shm`` files the
mode of the database file.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
# Mode bits that let anyone but the owner in.
OTHERS = 0o077
# The files SQLite keeps beside a database while it is open, or after a crash.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _ours(status: os.stat_result) -> bool:
    return status.st_uid == os.geteuid()


def _tighten(path: Path, mode: int, *, follow: bool) -> None:
    """Take the others' bits off ``path`` if it is ours; leave anything else alone (the system
    check reports what stays loose)."""
    try:
        status = path.stat(follow_symlinks=follow)
    except OSError:
        return
    if not _ours(status) or not status.st_mode & OTHERS:
        return
    if not follow and not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
        return  # a symbolic link: its target is someone's choice
    with contextlib.suppress(OSError):
        os.chmod(path, mode)


def private_directory(path: Path) -> None:
    """Create ``path`` (and its missing parents) ``0700``, or tighten it if it exists."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True)
        os.chmod(path, DIRECTORY_MODE)  # mkdir's mode is filtered by the umask
    _tighten(path, DIRECTORY_MODE, follow=True)


def private_files(directory: Path) -> None:
    """Tighten every file directly in ``directory`` to ``0600`` (not its subdirectories, such
    as the static files, which the directory's own mode already keeps private)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            _tighten(Path(entry.path), FILE_MODE, follow=False)


def private_file_create(path: Path) -> None:
    """Create ``path`` empty and ``0600`` if it does not exist (an empty file is a valid
    SQLite database), so that the program that fills it never makes it with the umask's
    mode; an existing one is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def sqlite_file(name: str | Path) -> Path | None:
    """The file of an SQLite database ``NAME``; None for one in memory."""
    text = str(name)
    if text in ("", ":memory:") or text.startswith("file:"):
        return None
    return Path(text)


def sqlite_files(database: Path) -> list[Path]:
    """The database file and the files SQLite keeps beside it."""
    return [database, *(database.with_name(database.name + end) for end in SQLITE_COMPANIONS)]


def private_sqlite(database: Path) -> None:
    """Make an SQLite database file private before it is opened: its directory created
    ``0700`` when it is missing (an existing one is someone's choice), the file created
    ``0600`` when it is missing, and it and its companions tightened."""
    if not database.parent.exists():
        private_directory(database.parent)
    with contextlib.suppress(OSError):
        private_file_create(database)
    for path in sqlite_files(database):
        _tighten(path, FILE_MODE, follow=False)


def loose(paths: Iterable[Path]) -> list[Path]:
    """Those of ``paths`` that exist and that others than their owner may read or enter."""
    found = []
    for path in paths:
        try:
            mode = path.stat().st_mode
        except OSError:
            continue
        if mode & OTHERS:
            found.append(path)
    return found


def private_paths(var_dir: Path, database: Path | None) -> list[Path]:
    """Every path that must be private: the var directory, each file directly in it, and an
    SQLite database (with its companions) wherever it is."""
    paths = [var_dir]
    with contextlib.suppress(OSError):
        paths += sorted(
            Path(entry.path)
            for entry in os.scandir(var_dir)
            if entry.is_file(follow_symlinks=False)
        )
    if database is not None:
        paths += [path for path in sqlite_files(database) if path not in paths]
    return paths
