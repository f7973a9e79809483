"""What the gates a call is held at say about how long it may wait."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from approvals.models import Gate


def hold_seconds(*, gates: Sequence[str]) -> int:
    """How long a call held at ``gates`` waits for a decision: the smallest of their
    timeouts. A gate without one, or that nobody configured, has ``COUNTERSIGN_HOLD_TIMEOUT``:
    no gate can hold a call for ever."""
    timeouts = dict(Gate.objects.filter(name__in=gates).values_list("name", "timeout_seconds"))
    default = settings.COUNTERSIGN_HOLD_TIMEOUT
    return min(timeouts.get(gate) or default for gate in gates or [""])
