"""What the gates a call is held at say about how long it may wait."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from approvals.queries.gates import gates_timeouts


def hold_seconds(*, gates: Sequence[str]) -> int:
    """How long a call held at ``gates`` waits for a decision: the smallest of their
    timeouts. A gate without one, or that nobody configured, has ``COUNTERSIGN_HOLD_TIMEOUT``:
    no gate can hold a call for ever."""
    timeouts = gates_timeouts(gates)
    default = settings.COUNTERSIGN_HOLD_TIMEOUT
    return min(timeouts.get(gate, default) for gate in gates or [""])
