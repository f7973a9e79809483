"""Running the statements of the hot paths as SQL written out, not built by the ORM.

The statements themselves live beside this module, one module per table
(``approvals/queries/<table>.py``); this one runs them and builds their names.

Every submission runs about ten statements, every decision about as many. The ORM spends
0.3–0.5 ms of Python building each one (a queryset, its lookups, the compiler) against
0.03 ms for SQLite to run it: that was most of a submission's cost (docs/performance.md).
These helpers run SQL given as text and do what the ORM would around it: values are
prepared by their model fields (so UUIDs, JSON and datetimes are stored exactly as the ORM
stores them) and read back through the fields' converters (so a datetime read from SQLite
comes back aware, a boolean as a ``bool``). Only the fixed statements of the submission,
decision and login paths are written this way; everything else uses the ORM.

Identifiers come from the models' own metadata (``Names``), never typed by hand, and are
quoted the SQL standard's way, which both supported databases (SQLite and PostgreSQL) follow.
"""

from __future__ import annotations

import sqlite3
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.fields import GenericForeignKey
from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX, SQLiteCursorWrapper
from django.db.models import CharField, DateTimeField, ForeignObjectRel, TextField, UUIDField

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models import Field, Model

    AnyField = Field[Any, Any]


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table(model: type[Model]) -> str:
    return quoted(model._meta.db_table)


class Names:
    """A model's table and column names, quoted, for ``str.format``: ``{L}`` is the table,
    ``{L.rule}`` a field's column by the field's name (a foreign key's too: ``{A.user}`` is
    ``"user_id"``). An unknown field raises ``FieldDoesNotExist`` as the statement is built,
    at import: a statement naming a column that is not there never runs."""

    def __init__(self, model: type[Model]) -> None:
        self.model = model

    def __format__(self, spec: str) -> str:
        return table(self.model)

    def __getattr__(self, name: str) -> str:
        field = self.model._meta.get_field(name)
        # A reverse relation or a generic key has no column of its own to name.
        if isinstance(field, ForeignObjectRel | GenericForeignKey) or field.column is None:
            raise FieldDoesNotExist(f"{self.model.__name__}.{name} is not a column")
        return quoted(field.column)


def statement(text: str, **models: type[Model]) -> str:
    """``text`` with each ``{Alias}`` and ``{Alias.field}`` replaced by the quoted table and
    column names of ``models[Alias]``."""
    return text.format(**{alias: Names(model) for alias, model in models.items()})


@cache
def fields(model: type[Model], *names: str) -> tuple[AnyField, ...]:
    """The named fields of ``model`` (by field name; all its concrete fields for none)."""
    if not names:
        return tuple(model._meta.concrete_fields)
    return tuple(model._meta.get_field(name) for name in names)  # type: ignore[misc]


@cache
def columns(of: tuple[AnyField, ...], alias: str = "") -> str:
    prefix = f"{quoted(alias)}." if alias else ""
    return ", ".join(prefix + quoted(field.column) for field in of)


def database() -> BaseDatabaseWrapper:
    """This thread's connection itself. ``django.db.connection`` is a proxy that looks the
    connection up again for every attribute read of it (a context-local lookup each time):
    the helpers below that prepare or convert many values look it up once."""
    return connections[DEFAULT_DB_ALIAS]


# A field's column and converters on one connection: the field itself (its id could be
# another's once it is gone), its column, its converters.
_Plan = tuple[Any, Any, tuple[Any, ...]]
# Per connection (one per thread), as the ORM's compiler looks them up for each query; by the
# field's id: a field's own hash is a Python method, and this runs for every value read.
_converters: weakref.WeakKeyDictionary[BaseDatabaseWrapper, dict[int, _Plan]] = (
    weakref.WeakKeyDictionary()
)


def _converters_of(wrapper: BaseDatabaseWrapper) -> dict[int, _Plan]:
    known = _converters.get(wrapper)
    if known is None:
        known = _converters[wrapper] = {}
    return known


def _column_converters(wrapper: BaseDatabaseWrapper, field: AnyField) -> _Plan:
    # As the ORM reads a column: a foreign key's through the field it refers to (a UUID
    # key is text on SQLite, and only the UUID field's converter makes it a UUID).
    column = field.get_col(field.model._meta.db_table)
    found = wrapper.ops.get_db_converters(column) + column.get_db_converters(wrapper)
    return field, column, tuple(found)


def _plan(known: dict[int, _Plan], wrapper: BaseDatabaseWrapper, field: AnyField) -> _Plan:
    plan = known.get(id(field))
    if plan is None or plan[0] is not field:
        plan = known[id(field)] = _column_converters(wrapper, field)
    return plan


def converted(row: Sequence[Any], of: Sequence[AnyField]) -> list[Any]:
    """A row's values as the ORM would give them for these fields."""
    wrapper = database()
    known = _converters_of(wrapper)
    values = []
    for value, field in zip(row, of, strict=True):
        _, column, converters = _plan(known, wrapper, field)
        for converter in converters:
            value = converter(value, column, wrapper)
        values.append(value)
    return values


def converted_column(values: Sequence[Any], field: AnyField) -> list[Any]:
    """Values of one column as the ORM would give them for ``field``."""
    wrapper = database()
    _, column, converters = _plan(_converters_of(wrapper), wrapper, field)
    if not converters:
        return list(values)
    result = []
    for value in values:
        for converter in converters:
            value = converter(value, column, wrapper)
        result.append(value)
    return result


def _run(text: str, params: Any, *, many: bool = False, read: bool = False) -> Any:
    """Run a statement on this thread's connection: its rows (``read``) or how many rows it
    changed. What Django's cursor does around a statement is done here, without the wrapper
    objects it builds for each one (they cost a statement 8–10 µs, against 1–2 µs for the
    database to run a short one): the connection opened if it is not, the same checks of
    thread and transaction, the backend's own cursor (SQLite's turns ``%s`` into ``?``), and
    errors raised as Django's. Where statements are logged (``DEBUG``, or a test capturing
    them) or an execute wrapper is installed, Django's cursor runs it, so they see it."""
    on = database()
    native = not (on.queries_logged or on.execute_wrappers)
    if native:
        if on.connection is None:
            on.ensure_connection()
        on.validate_thread_sharing()
        on.validate_no_broken_transaction()
    with on.wrap_database_errors:
        cursor = on.create_cursor() if native else on.cursor()
        try:
            if params is None:
                cursor.execute(text)
            elif native and isinstance(cursor, SQLiteCursorWrapper):
                # SQLite's cursor turns ``%s`` into ``?`` by a regular expression at every
                # statement (2 µs); these statements are few, and each is turned once.
                run = sqlite3.Cursor.executemany if many else sqlite3.Cursor.execute
                run(cursor, _qmarks(text), params)
            elif many:
                cursor.executemany(text, params)
            else:
                cursor.execute(text, params)
            return cursor.fetchall() if read else int(cursor.rowcount)
        finally:
            cursor.close()


@lru_cache(maxsize=1024)
def _qmarks(text: str) -> str:
    """``text`` as SQLite's cursor sends it: ``%s`` as ``?``, ``%%`` as ``%``."""
    qmarked: str = FORMAT_QMARK_REGEX.sub("?", text)
    return qmarked.replace("%%", "%")


def rows(sql: str, params: Sequence[Any] | None) -> list[tuple[Any, ...]]:
    """Run a query; its rows as the database driver gives them. With ``params`` None the
    text is sent as it is (a ``%`` in it is not a placeholder)."""
    return list(_run(sql, params, read=True))


def fetch(sql: str, params: Sequence[Any], of: Sequence[AnyField]) -> list[list[Any]]:
    """Run a query whose columns are ``of``, in that order; its rows, converted."""
    return [converted(row, of) for row in rows(sql, params)]


def locking(query: str) -> str:
    """The query locking the rows it reads until the transaction ends: ``FOR UPDATE`` where
    the database has it. SQLite has none, and needs none: its ``IMMEDIATE`` transactions
    hold the whole database's write lock (settings)."""
    return query + " FOR UPDATE" if connection.features.has_select_for_update else query


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run a statement that returns no rows; how many rows it changed."""
    return int(_run(sql, params))


def execute_many(sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """Run a statement that returns no rows once for each row of parameters."""
    _run(sql, rows, many=True)


def prepared(field: AnyField, value: Any, *, on: BaseDatabaseWrapper | None = None) -> Any:
    """A value as the ORM would send it to the database for this field; ``on``: this
    thread's ``database()``, when the caller prepares many values.

    The commonest values of the commonest fields (exactly those classes, not a subclass,
    which may prepare otherwise) are prepared here as the ORM's own chain of four or five
    calls would: a string of a text field is itself, an aware datetime goes straight to the
    backend's adapter, a UUID is itself or its hex as the backend stores it. Every other
    value goes through the field."""
    on = on or database()
    kind, of = type(field), type(value)
    if of is str and (kind is CharField or kind is TextField):
        return value
    if of is datetime and kind is DateTimeField and value.utcoffset() is not None:
        return on.ops.adapt_datetimefield_value(value)
    if of is uuid.UUID and kind is UUIDField:
        return value if on.features.has_native_uuid_field else value.hex
    return field.get_db_prep_save(value, on)


def instance(model: type[Model], of: Sequence[AnyField], values: Sequence[Any]) -> Any:
    """A model instance from converted values of all its concrete fields, as if loaded."""
    return model.from_db(connection.alias, [field.attname for field in of], values)


@cache
def _insert_statement(model: type[Model]) -> tuple[tuple[AnyField, ...], str, str]:
    stored = tuple(
        field
        for field in model._meta.concrete_fields
        if not (field.primary_key and field.get_internal_type().endswith("AutoField"))
    )
    # Names from the model's own metadata, values as parameters: nothing here comes in.
    statement = f"INSERT INTO {table(model)} ({columns(stored)}) VALUES "
    return stored, statement, "(" + ", ".join(["%s"] * len(stored)) + ")"


def insert(new: Sequence[Model]) -> None:
    """INSERT new instances of one model, each with every concrete field but an automatic
    primary key, as ``Model.save()`` would store them (``auto_now_add`` included). Their
    automatic primary keys are not read back: only models whose rows nobody refers to by
    that key right after are inserted this way."""
    if not new:
        return
    stored, statement, one_row = _insert_statement(type(new[0]))
    values: list[Any] = []
    on = database()
    for row in new:
        values.extend(prepared(field, field.pre_save(row, True), on=on) for field in stored)
        row._state.adding = False
        row._state.db = connection.alias
    execute(statement + ", ".join([one_row] * len(new)), values)


def update(row: Model, *names: str) -> None:
    """UPDATE the named fields of a stored instance, as ``save(update_fields=names)``
    would store them (``auto_now`` included)."""
    model = type(row)
    changed = fields(model, *names)
    on = database()
    values = [prepared(field, field.pre_save(row, False), on=on) for field in changed]
    pk = model._meta.pk
    assert pk is not None
    assignments = ", ".join(f"{quoted(field.column)} = %s" for field in changed)
    # Names from the model's own metadata, values as parameters: nothing here comes in.
    statement = f"UPDATE {table(model)} SET {assignments} WHERE {quoted(pk.column)} = %s"
    execute(statement, [*values, prepared(pk, row.pk, on=on)])
