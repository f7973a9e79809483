from __future__ import annotations

from typing import Any

import pytest


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
