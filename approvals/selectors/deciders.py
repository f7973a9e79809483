"""Who may see the approver's pages, and who may decide a held call (docs/ui.md).

A person may decide a call when they are active, hold ``approvals.decide_call``, are in the
group of every gate the call is held at (superusers: every gate), and are not the call's own
principal. It is written twice, side by side: as a set of call ids (a decision, a page) and
as a filter for the database (the queue, which counts and picks its rows there);
tests/approvals/test_ui_views.py holds the two to the same answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import BooleanField, ExpressionWrapper, Q, Value

from approvals.models import Call, Gate
from approvals.selectors.gates import gates_groups
from approvals.services.statements import HeldAtAny

VIEW_PERMISSIONS = ("approvals.view_call", "approvals.decide_call")
DECIDE_PERMISSION = "approvals.decide_call"


def may_view(user: User | AnonymousUser) -> bool:
    """Whether a person may see the approver's pages: logged in, active, and holding
    ``approvals.view_call`` or ``approvals.decide_call``."""
    return bool(
        user.is_authenticated
        and user.is_active
        and any(user.has_perm(permission) for permission in VIEW_PERMISSIONS)
    )


def required_approvals(gates: Iterable[str], required: dict[str, int]) -> int:
    """How many approvals a call held at ``gates`` needs, given each gate's requirement (a
    gate nobody configured needs one). Every approver is eligible at every gate of the call,
    so each approval counts at each: the largest requirement is the call's."""
    return max((required.get(gate, 1) for gate in gates), default=1)


def decidable_call_ids(*, user: User, calls: Iterable[Call]) -> set[uuid.UUID]:
    """The calls ``user`` may decide, in at most two queries however many calls."""
    if not user.is_active or not user.has_perm(DECIDE_PERMISSION):
        return set()
    own = user.get_username()
    candidates = [call for call in calls if call.principal != own]
    if user.is_superuser or not candidates:
        return {call.pk for call in candidates}
    gate_groups = gates_groups(names=sorted({gate for call in candidates for gate in call.gates}))
    if not gate_groups:  # no gate of these calls is kept to a group
        return {call.pk for call in candidates}
    group_ids = set(user.groups.values_list("pk", flat=True))
    return {
        call.pk
        for call in candidates
        if all(gate_groups[gate] in group_ids for gate in call.gates if gate in gate_groups)
    }


def gates_for_user(*, user: User) -> tuple[dict[str, int], tuple[str, ...]]:
    """Every gate's required approvals, and the gates closed to ``user`` (held by a group
    they are not in), in one query."""
    closed = Q(group__isnull=False) & ~Q(group__in=user.groups.values("pk"))
    rows = Gate.objects.annotate(
        closed=ExpressionWrapper(closed, output_field=BooleanField())
    ).values_list("name", "required_approvals", "closed")
    required = {name: approvals for name, approvals, _ in rows}
    return required, tuple(sorted(name for name, _, shut in rows if shut))


def decidable_filter(*, user: User, closed: tuple[str, ...]) -> Q:
    """``decidable_call_ids`` as a filter on calls; ``closed`` from ``gates_for_user``."""
    if not user.is_active or not user.has_perm(DECIDE_PERMISSION):
        return Q(Value(False))
    decidable = ~Q(principal=user.get_username())
    if closed and not user.is_superuser:
        decidable &= ~Q(HeldAtAny(closed))
    return decidable
