"""``Gate`` rows: what a decision needs of the gates a call is held at."""

from __future__ import annotations

from collections.abc import Sequence

from approvals.models import Gate
from approvals.queries import sql

_REQUIRED = sql.statement("SELECT {G.name}, {G.required_approvals} FROM {G} WHERE ", G=Gate)
_GROUPS = sql.statement(
    "SELECT {G.name}, {G.group} FROM {G} WHERE {G.group} IS NOT NULL AND ", G=Gate
)
_TIMEOUTS = sql.statement(
    "SELECT {G.name}, {G.timeout_seconds} FROM {G} WHERE {G.timeout_seconds} IS NOT NULL AND ",
    G=Gate,
)
_NAMED = sql.statement("{G.name} IN ", G=Gate)


def _named(names: Sequence[str]) -> str:
    return _NAMED + "(" + ", ".join(["%s"] * len(names)) + ")"


def gates_required_approvals(names: Sequence[str]) -> dict[str, int]:
    """The required approvals of each named gate that exists."""
    return dict(sql.rows(_REQUIRED + _named(names), names)) if names else {}


def gates_groups(names: Sequence[str]) -> dict[str, int]:
    """The group of each named gate that is kept to one."""
    return dict(sql.rows(_GROUPS + _named(names), names)) if names else {}


def gates_timeouts(names: Sequence[str]) -> dict[str, int]:
    """The timeout of each named gate that has one."""
    return dict(sql.rows(_TIMEOUTS + _named(names), names)) if names else {}
