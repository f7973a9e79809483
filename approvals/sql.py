"""Running the statements of the submission path as SQL written out, not built by the ORM.

Every submission runs about ten statements. The ORM spends 0.3–0.5 ms of Python building
each one (a queryset, its lookups, the compiler) against 0.03 ms for SQLite to run it: most
of a submission's cost (docs/performance.md). These helpers run SQL given as text, and do
what the ORM would around it: values are prepared by their model fields (so UUIDs, JSON and
datetimes are stored exactly as the ORM stores them) and read back through the fields'
converters (so a datetime read from SQLite comes back aware, a boolean as a ``bool``).
Only the fixed statements of the hot paths are written this way; everything else uses the
ORM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model


def quoted(name: str) -> str:
    return str(connection.ops.quote_name(name))


def table(model: type[Model]) -> str:
    return quoted(model._meta.db_table)


def fields(model: type[Model], *names: str) -> tuple[Field[Any, Any], ...]:
    """The named fields of ``model`` (by field name; all its concrete fields for none)."""
    if not names:
        return tuple(model._meta.concrete_fields)
    return tuple(model._meta.get_field(name) for name in names)  # type: ignore[misc]


def columns(of: Sequence[Field[Any, Any]], alias: str = "") -> str:
    prefix = f"{quoted(alias)}." if alias else ""
    return ", ".join(prefix + quoted(field.column) for field in of)


def converted(row: Sequence[Any], of: Sequence[Field[Any, Any]]) -> list[Any]:
    """A row's values as the ORM would give them for these fields."""
    values = []
    for value, field in zip(row, of, strict=True):
        column = field.cached_col
        for converter in connection.ops.get_db_converters(column) + column.get_db_converters(
            connection
        ):
            value = converter(value, column, connection)
        values.append(value)
    return values


def rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run a query; its rows as the database driver gives them."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def fetch(sql: str, params: Sequence[Any], of: Sequence[Field[Any, Any]]) -> list[list[Any]]:
    """Run a query whose columns are ``of``, in that order; its rows, converted."""
    return [converted(row, of) for row in rows(sql, params)]


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run a statement that returns no rows; how many rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def prepared(field: Field[Any, Any], value: Any) -> Any:
    """A value as the ORM would send it to the database for this field."""
    return field.get_db_prep_save(value, connection)


def instance(model: type[Model], of: Sequence[Field[Any, Any]], values: Sequence[Any]) -> Any:
    """A model instance from converted values of all its concrete fields, as if loaded."""
    return model.from_db(connection.alias, [field.attname for field in of], values)


def insert(rows: Sequence[Model]) -> None:
    """INSERT new instances of one model, each with every concrete field but an automatic
    primary key, as ``Model.save()`` would store them (``auto_now_add`` included). Their
    automatic primary keys are not read back: only models whose rows nobody refers to by
    that key right after are inserted this way."""
    if not rows:
        return
    model = type(rows[0])
    stored = [
        field
        for field in model._meta.concrete_fields
        if not (field.primary_key and field.get_internal_type().endswith("AutoField"))
    ]
    values: list[Any] = []
    for row in rows:
        values.extend(prepared(field, field.pre_save(row, True)) for field in stored)
        row._state.adding = False
        row._state.db = connection.alias
    one_row = "(" + ", ".join(["%s"] * len(stored)) + ")"
    # Names from the model's own metadata, values as parameters: nothing here comes in.
    statement = f"INSERT INTO {table(model)} ({columns(stored)}) VALUES "  # noqa: S608
    execute(statement + ", ".join([one_row] * len(rows)), values)


def update(row: Model, *names: str) -> None:
    """UPDATE the named fields of a stored instance, as ``save(update_fields=names)``
    would store them (``auto_now`` included)."""
    model = type(row)
    changed = fields(model, *names)
    values = [prepared(field, field.pre_save(row, False)) for field in changed]
    pk = model._meta.pk
    assert pk is not None
    assignments = ", ".join(f"{quoted(field.column)} = %s" for field in changed)
    # Names from the model's own metadata, values as parameters: nothing here comes in.
    statement = f"UPDATE {table(model)} SET {assignments} WHERE {quoted(pk.column)} = %s"  # noqa: S608
    execute(statement, [*values, prepared(pk, row.pk)])
