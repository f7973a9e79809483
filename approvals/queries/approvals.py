"""``Approval`` rows: a call's approvals with their users, read for a decision."""

from __future__ import annotations

from django.contrib.auth.models import User

from approvals.models import Approval, Call
from approvals.queries import sql
from approvals.queries.calls import call_key

_READ = "SELECT {approval_columns}, {user_columns} FROM " + sql.statement(
    "{A} a JOIN {U} u ON u.{U.id} = a.{A.user} WHERE a.{A.call} = %s"
    " ORDER BY a.{A.created_at}, a.{A.id}",
    A=Approval,
    U=User,
)


def approvals_with_users(call: Call) -> list[Approval]:
    """The call's approvals, oldest first, each with its user."""
    approval_fields, user_fields = sql.fields(Approval), sql.fields(User)
    read = _READ.format(
        approval_columns=sql.columns(approval_fields, "a"),
        user_columns=sql.columns(user_fields, "u"),
    )
    approvals, split = [], len(approval_fields)
    for values in sql.fetch(read, [call_key(call.pk)], approval_fields + user_fields):
        approval: Approval = sql.instance(Approval, approval_fields, values[:split])
        approval.user = sql.instance(User, user_fields, values[split:])
        approvals.append(approval)
    return approvals
