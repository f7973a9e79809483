"""Who may see the approver's pages, and who may decide a held call (docs/ui.md).

A person may decide a call when they are active, hold ``approvals.decide_call``, are in the
group of every gate the call is held at (superusers: every gate), and are not the call's own
principal. ``decidable_filter`` is the one definition, a filter on calls; the queue counts and
picks its rows with it, and a decision or a page asks the database the same question
(``calls_decidable``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet, Value

from approvals.models import Call, Gate
from approvals.services.statements import HeldAtAny, HeldAtMissingGate

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


@dataclass(frozen=True, slots=True)
class GatesForUser:
    """Every gate's required approvals, the gates closed to one person (kept to a group they
    are not in), and the gates that require a passkey."""

    required: dict[str, int]
    closed: tuple[str, ...]
    passkey: frozenset[str]


def gates_read_for_user(*, user: User) -> GatesForUser:
    """``GatesForUser`` from two plain reads, the gates and the person's groups."""
    rows = list(
        Gate.objects.values_list("name", "required_approvals", "group_id", "require_passkey")
    )
    # The person's groups matter only when some gate is kept to a group.
    kept = any(group is not None for _, _, group, _ in rows)
    groups = set(user.groups.values_list("pk", flat=True)) if kept else set()
    return GatesForUser(
        required={name: approvals for name, approvals, _, _ in rows},
        closed=tuple(
            sorted(name for name, _, group, _ in rows if group is not None and group not in groups)
        ),
        passkey=frozenset(name for name, _, _, passkey in rows if passkey),
    )


def _may_decide_any(user: User) -> bool:
    return user.is_active and user.has_perm(DECIDE_PERMISSION)


def decidable_filter(*, user: User, closed: tuple[str, ...]) -> Q:
    """The calls ``user`` may decide, as a filter on calls; ``closed`` from
    ``gates_read_for_user``."""
    if not _may_decide_any(user):
        return Q(Value(False))
    decidable = ~Q(principal=user.get_username())
    if not user.is_superuser:
        # A gate nobody configured any more has no group to check: a superuser decides.
        decidable &= ~Q(HeldAtMissingGate())
        if closed:
            decidable &= ~Q(HeldAtAny(closed))
    return decidable


def decidable_value(*, user: User, closed: tuple[str, ...]) -> ExpressionWrapper[Q]:
    """``decidable_filter`` as a value on each call row: whether ``user`` may decide it."""
    return ExpressionWrapper(
        decidable_filter(user=user, closed=closed), output_field=BooleanField()
    )


def calls_decidable(*, user: User) -> QuerySet[Call]:
    """The calls ``user`` may decide, whatever their status."""
    if not _may_decide_any(user):
        return Call.objects.none()
    closed = () if user.is_superuser else gates_read_for_user(user=user).closed
    return Call.objects.filter(decidable_filter(user=user, closed=closed))


def decidable_call_ids(*, user: User, calls: Iterable[Call]) -> set[uuid.UUID]:
    """Which of ``calls`` ``user`` may decide, as the database answers it."""
    ids = [call.pk for call in calls]
    if not ids:
        return set()
    return set(calls_decidable(user=user).filter(pk__in=ids).values_list("pk", flat=True))
