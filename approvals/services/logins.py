"""Login lockouts in the audit log: when one begins, and when admin lifts one.

A lockout is django-axes' access attempt for a username and client address
(approvals/accounts/lockouts.py): the entries name it as a ``login`` object by the attempt's id, and
say which username and address it holds, and how many failures it counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Sum

from approvals.models import AuditEntry
from approvals.ops import metrics
from approvals.services.audit import audit_deferred, audit_record


def _described(username: str | None, ip_address: str | None, failures: int) -> str:
    return json.dumps(
        {"username": username, "ip_address": ip_address, "failures": failures}, sort_keys=True
    )


def login_lockout_record(*, username: str | None, ip_address: str | None) -> AuditEntry:
    """Audit the lockout that a failed login has just begun for ``username`` from
    ``ip_address``."""
    with transaction.atomic():
        attempts = AccessAttempt.objects.filter(username=username, ip_address=ip_address)
        latest = attempts.order_by("-attempt_time", "-pk").first()
        failures = attempts.aggregate(failures=Sum("failures_since_start"))["failures"] or 0
        entry = audit_record(
            action=AuditEntry.Action.LOGIN_LOCKED_OUT,
            object_type=AuditEntry.ObjectType.LOGIN,
            # None only if admin deleted the attempt in the moment since it was counted.
            object_id="" if latest is None else latest.pk,
            after=_described(username, ip_address, failures),
        )
        metrics.login_locked_out()
    return entry


def login_attempts_unlock(*, attempts: Iterable[AccessAttempt], by: User | None) -> int:
    """Delete access attempts, which lifts their lockouts (and forgets failures that had not
    locked anything yet), each audited with who did it. How many were deleted."""
    deleted = 0
    # The entries after every deletion: the chain's head is then the last lock taken.
    with transaction.atomic(), audit_deferred():
        for attempt in attempts:
            audit_record(
                action=AuditEntry.Action.LOGIN_UNLOCKED,
                object_type=AuditEntry.ObjectType.LOGIN,
                object_id=attempt.pk,
                user=by,
                before=_described(
                    attempt.username, attempt.ip_address, attempt.failures_since_start
                ),
            )
            attempt.delete()
            deleted += 1
    return deleted
