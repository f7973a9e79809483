"""The one write of single sign-on: the person a provider's claims name, made at their first
login, and their groups set from the claims at every login.

People and memberships are audited by their model signals (approvals/accounts/receivers.py):
the person's creation and each change of their groups is an entry.
"""

from __future__ import annotations

import re

from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction

from identity.models import SsoIdentity

USERNAME_MAX = 150  # Django's User.username
# What Django's username validator accepts; anything else in a claimed name is dropped.
_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]")
FALLBACK_USERNAME = "user"
NO_SUBJECT = "the ID token names no subject"


def _wanted_username(claims: dict[str, object]) -> str:
    """``preferred_username``, else the email address's local part, in the characters a
    username may have (room left for a number)."""
    preferred, email = claims.get("preferred_username"), claims.get("email")
    candidates = (
        preferred if isinstance(preferred, str) else "",
        email.partition("@")[0] if isinstance(email, str) else "",
    )
    for text in candidates:
        cleaned = _NOT_IN_USERNAME.sub("", text)[: USERNAME_MAX - 8]
        if cleaned:
            return cleaned
    return FALLBACK_USERNAME


def _unique_username(wanted: str) -> str:
    """``wanted``, or with ``-2``, ``-3``… when someone has it already (never their account:
    a name is no proof of being that person)."""
    taken = set(
        User.objects.filter(username__istartswith=wanted).values_list("username", flat=True)
    )
    taken_folded = {name.casefold() for name in taken}
    if wanted.casefold() not in taken_folded:
        return wanted
    number = 2
    while f"{wanted}-{number}".casefold() in taken_folded:
        number += 1
    return f"{wanted}-{number}"


def groups_claimed(*, claims: dict[str, object], claim: str) -> list[str]:
    """The group names of the claim: a list of names, or one name; anything else is none."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [name for name in value if isinstance(name, str)]
    return []


def _created(*, issuer: str, subject: str, claims: dict[str, object]) -> User:
    email = claims.get("email")
    user = User(
        username=_unique_username(_wanted_username(claims)),
        email=email if isinstance(email, str) else "",
    )
    user.set_unusable_password()
    user.save()
    SsoIdentity.objects.create(issuer=issuer, subject=subject, user=user)
    return user


def _signed_in(*, issuer: str, subject: str, claims: dict[str, object], groups_claim: str) -> User:
    with transaction.atomic():
        found = (
            SsoIdentity.objects.select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if found is None:
            user = _created(issuer=issuer, subject=subject, claims=claims)
        else:
            user = found.user
        if user.is_active:
            names = groups_claimed(claims=claims, claim=groups_claim)
            groups = list(Group.objects.filter(name__in=names))
            if {g.pk for g in groups} != set(user.groups.values_list("pk", flat=True)):
                user.groups.set(groups)
        return user


def sso_user_sign_in(*, issuer: str, claims: dict[str, object], groups_claim: str) -> User:
    """The person ``claims`` (checked already) name at ``issuer``, by their ``sub``: made at
    their first login; then, if active, in exactly the existing groups the groups claim names
    (unknown names are ignored, no claim is no group). A deactivated person is left as is."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise ValueError(NO_SUBJECT)
    try:
        return _signed_in(issuer=issuer, subject=subject, claims=claims, groups_claim=groups_claim)
    except IntegrityError:
        # The same person's first login twice at once, or the name taken meanwhile: once
        # more finds what the other made, or picks another name.
        return _signed_in(issuer=issuer, subject=subject, claims=claims, groups_claim=groups_claim)
