"""``Ledger`` rows: created if missing, then read (and locked) by their identity."""

from __future__ import annotations

from collections.abc import Sequence

from approvals.models import Ledger
from approvals.queries import sql

LedgerIdentity = tuple[str, str, str]  # a Ledger row's rule, currency and key digest

_CREATE = sql.statement(
    "INSERT INTO {L} ({L.rule}, {L.currency}, {L.key_digest}) VALUES ", L=Ledger
)
_READ = sql.statement(
    "SELECT {L.id}, {L.rule}, {L.currency}, {L.key_digest} FROM {L} WHERE ", L=Ledger
)
_NAMED = sql.statement("({L.rule} = %s AND {L.currency} = %s AND {L.key_digest} = %s)", L=Ledger)
_ORDER = sql.statement(" ORDER BY {L.rule}, {L.currency}, {L.key_digest}", L=Ledger)


def _params(identities: Sequence[LedgerIdentity]) -> list[str]:
    return [value for identity in identities for value in identity]


def ledgers_create(identities: Sequence[LedgerIdentity]) -> None:
    """Insert the ledgers that do not exist yet; the others are left as they are."""
    rows = ", ".join(["(%s, %s, %s)"] * len(identities))
    sql.execute(_CREATE + rows + " ON CONFLICT DO NOTHING", _params(identities))


def ledgers_read(identities: Sequence[LedgerIdentity], *, lock: bool) -> list[Ledger]:
    """The ledgers with these identities, in identity order; ``lock`` holds their rows until
    the transaction ends (PostgreSQL locks them as the sort emits them: always in this
    order, so two transactions never wait on each other's rows in a cycle)."""
    query = _READ + " OR ".join([_NAMED] * len(identities)) + _ORDER
    of = sql.fields(Ledger, "id", "rule", "currency", "key_digest")
    found = sql.fetch(sql.locking(query) if lock else query, _params(identities), of)
    return [sql.instance(Ledger, of, values) for values in found]
