"""The vocabulary has one home: approvals/models.py's TextChoices (docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

from approvals.models import Call

ROOT = Path(__file__).resolve().parents[2]
# Where the statuses are defined (a message's status shares the word "pending").
MODELS = frozenset({"approvals/models.py", "notifications/models.py"})
STATUS_TEXT = re.compile("[\"'](" + "|".join(Call.Status.values) + ")[\"']")


def _server_code() -> list[Path]:
    # The agent client (clients/python/) speaks only the public API and keeps its own words.
    folders = ("approvals", "notifications", "config")
    paths = [path for folder in folders for path in (ROOT / folder).rglob("*.py")]
    return [
        path
        for path in paths
        if path.relative_to(ROOT).as_posix() not in MODELS and "/migrations/" not in path.as_posix()
    ]


def test_no_status_is_spelled_out_outside_models() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _server_code()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if STATUS_TEXT.search(line)
    ]
    assert offenders == []


def test_the_status_finder_finds_statuses() -> None:
    assert STATUS_TEXT.search('calls.filter(status="pending")')
    assert STATUS_TEXT.search("FINAL = frozenset({'allowed', 'refused'})")
    assert not STATUS_TEXT.search("calls.filter(status=Call.Status.PENDING)")


def test_the_sets_of_statuses_are_the_statuses() -> None:
    statuses = set(Call.Status.values)
    assert statuses - {Call.Status.PENDING} == Call.Status.FINAL
    assert Call.Status.NEVER_HELD | Call.Status.DECIDED == Call.Status.FINAL
    assert not Call.Status.NEVER_HELD & Call.Status.DECIDED
