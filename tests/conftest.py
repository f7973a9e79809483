from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management.commands import flush
from django.db import connections

from approvals.queries.audit_entries import guard_create, guard_drop


@pytest.fixture(autouse=True)
def _plain_static_storage(settings: Any) -> None:
    """Tests run without collectstatic, so the manifest storage has no manifest to read."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    """Rate limits are tested on purpose (tests/approvals/test_ratelimit.py); elsewhere the
    process-wide counters would carry over from test to test."""
    settings.COUNTERSIGN_RATE_LIMIT = None


@pytest.fixture(autouse=True, scope="session")
def _flush_past_the_audit_guard() -> Iterator[None]:
    """Transactional tests end with ``flush``. On SQLite that is a ``DELETE`` per table, which
    the audit table's triggers refuse (as they must anywhere else): in the test run only,
    they are dropped for the flush and created again right after. PostgreSQL's flush is a
    ``TRUNCATE``, which row triggers let through (approvals/queries/audit_entries.py)."""
    handle = flush.Command.handle

    def flush_past_the_guard(command: flush.Command, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "sqlite":
            return handle(command, **options)
        guard_drop(connection)
        try:
            return handle(command, **options)
        finally:
            guard_create(connection)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush.Command, "handle", flush_past_the_guard)
        yield
