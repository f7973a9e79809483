"""What the gates a call is held at say: how long it may wait, how many approvals it needs,
and which group may decide it."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from approvals.models import Gate


def hold_seconds(*, gates: Sequence[str]) -> int:
    """How long a call held at ``gates`` waits for a decision: the smallest of their
    timeouts. A gate without one, or that nobody configured, has ``COUNTERSIGN_HOLD_TIMEOUT``:
    no gate can hold a call for ever."""
    named = Gate.objects.filter(name__in=gates) if gates else Gate.objects.none()
    timeouts = {
        name: seconds
        for name, seconds in named.values_list("name", "timeout_seconds")
        if seconds is not None
    }
    default = settings.COUNTERSIGN_HOLD_TIMEOUT
    return min(timeouts.get(gate, default) for gate in gates or [""])


def gates_required_approvals(*, names: Sequence[str]) -> dict[str, int]:
    """The required approvals of each named gate that exists."""
    if not names:
        return {}
    return dict(Gate.objects.filter(name__in=names).values_list("name", "required_approvals"))


def gates_groups(*, names: Sequence[str]) -> dict[str, int]:
    """The group (its id) of each named gate that is kept to one."""
    if not names:
        return {}
    kept = Gate.objects.filter(name__in=names, group__isnull=False)
    return dict(kept.values_list("name", "group"))
