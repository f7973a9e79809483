"""``python -m config.serve``: the options Countersign relies on reach uvicorn, and what
start-up loaded is frozen out of the cyclic collector's way before serving."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import uvicorn

from config import serve


def test_start_up_is_frozen_and_websockets_are_not_compressed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: dict[str, Any] = {}

    def run(app: str, **options: Any) -> None:
        started.update(options, app=app, frozen=gc.get_freeze_count())

    monkeypatch.setattr(uvicorn, "run", run)
    gc.unfreeze()
    try:
        serve.main(["--port", "8123", "--no-access-log"])
    finally:
        gc.unfreeze()
    assert started["app"] == "config.asgi:application"
    assert started["frozen"] > 0
    assert started["ws_per_message_deflate"] is False
    assert started["port"] == 8123
    assert started["access_log"] is False
